"""``%gpu_pause`` line magic: the kernel API for people who prefer typing to calling."""

from __future__ import annotations

from IPython.core.magic import Magics, line_magic, magics_class

from . import api

_USAGE = "usage: %gpu_pause register NAME… | unregister NAME… | registered | check | status | pause"


@magics_class
class GpuPauseMagics(Magics):
    @line_magic
    def gpu_pause(self, line: str):
        words = line.split()
        if not words:
            print(_USAGE)
            return None
        cmd, args = words[0], words[1:]
        if cmd == "register":
            print("registered:", ", ".join(api.register(*args)) or "(none)")
        elif cmd == "unregister":
            print("registered:", ", ".join(api.unregister(*args)) or "(none)")
        elif cmd == "registered":
            print("registered:", ", ".join(api.registered()) or "(none)")
        elif cmd == "check":
            print(repr(api.check()))
        elif cmd == "status":
            s = api.session()
            print(f"{s['path']}: {s['state']} — {s.get('message') or ''}".rstrip(" —"))
        elif cmd == "pause":
            s = api.pause()
            print(
                f"pause requested: {s['state']} — the kernel stops once the checkpoint is verified"
            )
        else:
            print(_USAGE)
        return None


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(GpuPauseMagics)
