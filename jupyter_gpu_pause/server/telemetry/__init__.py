"""Telemetry: what the server tells the outside about its sessions.

``metrics`` (Prometheus) and ``webhooks`` (signed deliveries from the records' outbox). Both
listen to the session table's events; nothing below them imports this room.

Imports ``config`` and ``state``.
"""
