"""Configuration: the settings and how each is checked when the server starts.

``settings`` declares every ``c.GpuPauseApp.*`` setting (``GpuPauseSettings``, grouped as the
generated settings reference shows them); ``traits`` holds the range checks every configurable class
shares; ``checks`` what traitlets cannot check (a store URL, a private key file, the records
database's folder) and ``ConfigError``, the one error a bad setting raises; ``startup`` the
checks the app runs before anything is built.

Imports no other room (only ``store``): it is the lowest of ``server/``, every room may use it.
"""
