"""The package's version, in a module that imports nothing else of ours: every part may import
it without importing the package's kernel API (``__init__``) on the way."""

try:
    from ._version import __version__
except ImportError:  # running from a source tree that was never built
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
