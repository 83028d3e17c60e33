"""``jupyter gpu-pause``: everything the Lab panel does, for a terminal or a script.

The live commands talk to a running server's REST API (``client``); ``verify`` and ``gc`` also
work offline, on the store itself (``maintenance``). See docs/cli.md.
"""
