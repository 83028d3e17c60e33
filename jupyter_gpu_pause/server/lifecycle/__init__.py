"""Lifecycle: pausing and resuming sessions, and everything that decides their state.

``lifecycle`` (the service the handlers, monitor and integrations call), ``operations`` (one
operation per session at a time, and the net under it), ``pause``, ``resume``, ``inplace``
(the resume of a kernel suspended in place), ``check`` (the dry run), ``rebuild`` (re-running
the cells that make what a resume did not bring back), ``recovery`` (sessions the store lost or
gave back) and ``sessions`` (the session table).

Imports ``config``, ``state``, ``capacity``, ``kernels`` and ``suspend``; never ``telemetry``:
metrics and webhooks listen to the events this room records.
"""
