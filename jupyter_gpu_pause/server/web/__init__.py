"""Web: the REST API's handlers (``handlers``), thin over the lifecycle service they are given.

Imports ``config`` and ``state`` only: the handlers reach the services through the app's
settings, not through imports.
"""
