"""Files and folders only their owner can read: checkpoints, records and keys hold user data."""

from __future__ import annotations

import errno
import os
import stat


def private_makedirs(path: str) -> list[str]:
    """``os.makedirs`` whose new folders are private to their owner (0700); returns the
    folders it made, outermost first (their parents' entries changed: a durable write fsyncs
    them).

    ``os.makedirs(mode=…)`` applies the mode to the last folder only; every folder we create
    holds checkpoints, records or keys, so each one is made 0700.
    """
    missing = []
    head = os.path.abspath(path)
    while head and not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    made = []
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
            made.append(d)
        except FileExistsError:
            if not os.path.isdir(d):  # a file where a folder belongs: say it as the OS would
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), d) from None
    return made


def private_file(path: str) -> None:
    """Make sure ``path`` exists as a regular file with mode 0600 (created empty if missing).

    For files a library creates itself (SQLite): created here first with the right mode, and
    tightened if an older version left it readable by others.
    """
    private_makedirs(os.path.dirname(os.path.abspath(path)))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
