"""The one table from a REST error answer to the client's error class (``error_for``): a
reason names a precise class before the status decides, and the fields a script acts on
(``where``, ``retry_at``) are read from the body. Budgets' 409 ``budget-exceeded`` is mapped
here before the server side exists on this branch."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyter_gpu_pause.client import (
    BadRequest,
    BudgetExceeded,
    CapacityUnavailable,
    Forbidden,
    GpuPauseError,
    IdempotencyKeyReused,
    NotFound,
    ResumedElsewhere,
    ServerError,
    Unavailable,
    WrongState,
)
from jupyter_gpu_pause.client.errors import error_for


@pytest.mark.parametrize(
    "status, reason, cls",
    [
        (400, "bad-device", BadRequest),
        (401, "unauthorized", Forbidden),
        (403, "forbidden", Forbidden),
        (404, "unknown-session", NotFound),
        (409, "wrong-state", WrongState),
        (409, "no-checkpoint", WrongState),
        (409, "resumed-elsewhere", ResumedElsewhere),
        (409, "budget-exceeded", BudgetExceeded),
        (422, "idempotency-key-reused", IdempotencyKeyReused),
        (500, "internal", ServerError),
        (503, "not-started", Unavailable),
        (503, "capacity-unavailable", CapacityUnavailable),
        (418, "teapot", ServerError),
    ],
)
def test_each_answer_becomes_its_class(status, reason, cls):
    body = {"message": "what happened", "reason": reason}
    e = error_for(status, body)
    assert type(e) is cls and isinstance(e, GpuPauseError)
    assert (e.message, e.status, e.reason, e.body) == ("what happened", status, reason, body)
    assert str(e) == "what happened"


def test_where_and_retry_at_are_read_from_the_body():
    elsewhere = error_for(409, {"message": "m", "reason": "resumed-elsewhere", "where": "a@b:1"})
    assert isinstance(elsewhere, WrongState) and elsewhere.where == "a@b:1"
    over = error_for(
        409, {"message": "m", "reason": "budget-exceeded", "retry_at": "2027-01-01T00:00:00Z"}
    )
    assert over.retry_at == datetime(2027, 1, 1, tzinfo=timezone.utc)
    # a server that gives no time (or an unreadable one) leaves retry_at None
    for body in ({}, {"retry_at": 3}, {"retry_at": "soon"}):
        refused = error_for(409, {"message": "m", "reason": "budget-exceeded", **body})
        assert refused.retry_at is None
