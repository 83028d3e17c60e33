"""The Hub console: a JupyterHub service (``jupyter gpu-pause hub-service``) that shows a hub's
admins every user's GPU sessions, the line for capacity, usage and budgets, and lets them pause
a session, cancel a wait, or grant and reset a budget (docs/hub-console.md).

It runs beside the Hub, never in a user's server: it reads the capacity queue that the users'
servers share (their sessions, published there by each server, ``server/capacity/board.py``)
and the Hub's REST API, and acts through each user's own server, via the Hub's proxy, with the
service's token. No kernel can reach that token.

    console     what the page and its JSON show, and the actions      imports: server rooms
    hub         the Hub's REST API and the users' servers behind it
    handlers    the page and ``api/``, behind Hub OAuth
    app         ``jupyter gpu-pause hub-service``: settings and wiring
"""
