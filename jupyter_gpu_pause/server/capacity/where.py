"""Where the queue lives: ``capacity_queue_url`` checked when the server starts (a bad value
stops it, naming the setting, as every setting in ``config.checks`` does)."""

from __future__ import annotations

import os

from ..config.checks import ConfigError
from .folder import check_queue_folder
from .postgres import is_postgres_url, parse_postgres_url
from .queue import QueueError


def check_queue_url(url: str) -> str:
    """``capacity_queue_url``: a folder on this machine every sharing server can write, or a
    PostgreSQL URL (the cluster's queue).

    Returns the folder's absolute path, or the URL as given. A PostgreSQL URL is checked for
    its form only: a database that cannot be reached now is an outage the server rides out
    (resumes answer 503 until it is back), not a reason to refuse notebooks.
    """
    if not url:
        raise ConfigError("GpuPauseApp.capacity_queue_url is empty; give a folder path")
    if is_postgres_url(url):
        try:
            parse_postgres_url(url)
        except QueueError as e:  # the URL may hold a password: never repeat it
            raise ConfigError(f"GpuPauseApp.capacity_queue_url: {e}") from None
        return url
    label = f"GpuPauseApp.capacity_queue_url = {url!r}"
    if url.startswith("file://"):
        url = url[len("file://") :]
    elif "://" in url:
        raise ConfigError(
            f"{label}: give a folder on this machine (the servers of one machine) or a "
            "postgresql:// URL (the servers of a cluster)"
        )
    folder = os.path.abspath(os.path.expanduser(url))
    try:
        check_queue_folder(folder)
    except QueueError as e:
        raise ConfigError(f"{label}: {e}") from None
    return folder
