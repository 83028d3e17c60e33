"""The answers kept for idempotency keys in the records (SQLite, on disk): found again for the
same user within the window, never for another user, and purged once expired."""

from __future__ import annotations

import time

import pytest

from jupyter_gpu_pause.server.state.records import KeptAnswer, Records


@pytest.fixture
def records(tmp_path):
    r = Records(str(tmp_path / "records.sqlite"))
    yield r
    r.close()


@pytest.mark.asyncio
async def test_an_answer_is_kept_per_user_and_purged_once_expired(records, tmp_path):
    # Given alice's answer to key k, kept now
    answer = KeptAnswer("POST /gpu-pause/api/sessions/s1/pause abc", 202, b'{"id": "s1"}')
    start = time.time()
    await records.keep_answer("user:alice", "k", answer, expired=start - 86400)
    # Then alice finds it (from a second Records on the same file: it is on disk), bob not
    again = Records(records.db_path)
    try:
        assert await again.kept_answer("user:alice", "k", since=start - 86400) == answer
    finally:
        again.close()
    assert await records.kept_answer("user:bob", "k", since=start - 86400) is None
    # And a key older than the window is not an answer
    assert await records.kept_answer("user:alice", "k", since=time.time() + 1) is None

    # When another answer is kept after k expired
    other = KeptAnswer("POST /gpu-pause/api/sessions/s2/pause def", 202, b"{}")
    await records.keep_answer("user:bob", "k2", other, expired=time.time() + 1)
    # Then k is gone from the records, not only hidden
    assert await records.kept_answer("user:alice", "k", since=0) is None
