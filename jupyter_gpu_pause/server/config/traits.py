"""Range checks shared by every configurable class, so each bad value reads the same way."""

from __future__ import annotations

from traitlets import TraitError


def not_negative(owner, proposal, hint: str = ""):
    """A traitlets ``@validate`` body: the value, or a TraitError naming ``Class.trait = value``."""
    if proposal["value"] < 0:
        raise TraitError(
            f"{type(owner).__name__}.{proposal['trait'].name} = {proposal['value']!r}: "
            f"must be >= 0{hint}"
        )
    return proposal["value"]
