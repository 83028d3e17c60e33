"""Waiting on conditions instead of sleeping: poll until a condition holds, or fail saying so."""

from __future__ import annotations

import asyncio


async def wait_for(predicate, timeout: float = 30.0, step: float = 0.1, what: str = "condition"):
    """The first truthy value of the coroutine function ``predicate``; AssertionError if none
    comes within ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        await asyncio.sleep(step)
