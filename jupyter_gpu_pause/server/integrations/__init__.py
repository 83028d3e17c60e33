"""Integrations: what ties the server to the world around its requests.

``hub`` (stop the server under JupyterHub once its GPU work is paused), ``shutdown`` (the
checkpoint of a stopping server, SIGINT without a TTY), ``preemption`` (a cloud's preemption
notice) and ``maintenance`` (the store's retention and garbage collection on a schedule).

Imports ``config``, ``state``, ``lifecycle`` and ``telemetry``.
"""
