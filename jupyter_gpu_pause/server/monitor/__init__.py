"""Monitor: watching every kernel and acting on the admins' idle policies.

``monitor`` (the loop: activity, GPU use, warnings, pauses), ``activity`` (messages, busy/idle,
connections, code run), ``policy`` (parsing and matching the policies) and ``accounting``
(GPU-seconds held, for the report).

Imports ``config``, ``state``, ``capacity`` and ``lifecycle`` (it pauses through it).
"""
