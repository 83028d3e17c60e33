"""The Jupyter server side. ``app`` wires the rooms below together; each room's ``__init__``
says what lives in it and what it may import (``tests/test_structure.py`` keeps it so):

    config      settings and their checks                   imports: store
    state       sessions, errors, records, event bus        imports: config
    capacity    GPUs, providers, the queue                  imports: config, state
    kernels     reaching kernels: local, gateway            imports: + capacity
    suspend     the CUDA driver's suspend in place          imports: config, state, capacity
    lifecycle   pause, resume, check, recovery, sessions    imports: + kernels, suspend
    monitor     idle policies, activity, accounting         imports: + lifecycle
    telemetry   metrics, webhooks (listeners of events)     imports: config, state
    budgets     GPU-hour budgets: rules, ledger, admission  imports: config, state
    integrations  hub, shutdown, preemption, maintenance    imports: all but monitor, web
    web         the REST handlers                           imports: config, state

For an extension listening on the event bus, ``SCHEMA_ID`` is our events' schema id and
``EventType`` the types its events have.
"""

from .state.bus import SCHEMA_ID
from .state.event_types import EventType

__all__ = ["SCHEMA_ID", "EventType"]
