"""State: what a session is and where what is known about it is kept.

``model`` (the Session and its states), ``errors`` (the API's error vocabulary), ``records``
(the SQLite database: sessions, events, accounting, the webhook outbox), ``checkpoints`` (the
store's checkpoints as the server lists them), ``views`` (the Session JSON), ``event_types``
(the closed list of event types), ``asker`` (who asked an operation on someone else's
session), ``clock`` (the phase timings events carry) and ``bus``
(every event on jupyter_server's event bus; ``events/`` holds its schema).

Imports only ``config`` among the rooms: everything else builds on it.
"""
