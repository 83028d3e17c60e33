"""Moved to ``server.state.bus``; this name is kept for one release."""

from .state.bus import *  # noqa: F403
from .state.bus import SCHEMA_ID  # noqa: F401
