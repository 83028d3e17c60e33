"""Retention rules: which checkpoints a store keeps, as the admin configured them.

``GpuPauseApp.retention`` is a dict; ``parse_retention`` turns it into ``Retention`` or raises
ValueError naming the key, so a typo (``keep_lats``) or a negative number stops the server at
start instead of silently keeping everything.

``plan_deletions`` is the rule itself, a pure function of what the store holds and what the
server knows: it deletes nothing, it only says which manifests go and which rule sent each one.
Keeping it free of I/O lets every case (the paused session's only copy, another server's
sessions, blobs shared between checkpoints) be tested as a table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta, timezone
from typing import Any

from ..units import size_text


@dataclass(frozen=True)
class Retention:
    """0 turns a rule off. Per session: ``keep_last``, ``max_age_days``, ``max_total_bytes``;
    for the whole store: ``max_store_bytes``."""

    keep_last: int = 3
    max_age_days: float = 30
    max_total_bytes: int = 0
    max_store_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_RETENTION = Retention().as_dict()
_WHOLE = {"keep_last", "max_total_bytes", "max_store_bytes"}


def parse_retention(raw: object) -> Retention:
    """The rules of ``raw`` (missing keys take their defaults); ValueError names a bad key."""
    if not isinstance(raw, dict):
        raise ValueError(f"must be a dict of rules, not {raw!r}")
    known = {f.name for f in fields(Retention)}
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(map(repr, unknown))}; the rules are "
            f"{', '.join(sorted(known))}"
        )
    values: dict[str, Any] = {}
    for key, value in raw.items():
        whole = key in _WHOLE
        ok = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or value < 0:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{key} = {value!r}: must be {kind} >= 0 (0 turns the rule off)")
        values[key] = value
    return Retention(**values)


# -- the rule ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One manifest in the store, as retention sees it.

    ``blobs`` maps each blob hash the manifest names to its size (empty for a manifest that
    could not be read); ``valid``: its signature verifies and every blob it names is stored
    with its size. ``created`` is the time in the checkpoint id.
    """

    session_id: str
    checkpoint_id: str
    created: datetime
    blobs: Mapping[str, int] = field(default_factory=dict)
    valid: bool = True


@dataclass(frozen=True)
class Deletion:
    """A manifest to delete, the rule that fired (a ``Retention`` field name) and why, in
    words for the ``checkpoint_deleted`` event."""

    session_id: str
    checkpoint_id: str
    rule: str
    message: str


def checkpoint_time(checkpoint_id: str) -> datetime:
    """The creation time a checkpoint id carries (``20261202T101500Z-…``), UTC."""
    stamp = checkpoint_id.split("-", 1)[0]
    return datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)


def distinct_bytes(entries: Iterable[Entry]) -> int:
    """Bytes of the distinct blobs the entries reference: a blob shared by two checkpoints (or
    two sessions) is stored once, so it counts once."""
    sizes: dict[str, int] = {}
    for e in entries:
        sizes.update(e.blobs)
    return sum(sizes.values())


def plan_deletions(
    rules: Retention,
    entries: Iterable[Entry],
    *,
    owned: Set[str],
    paused: Set[str],
    pinned: Set[tuple[str, str]] = frozenset(),
    now: datetime,
) -> list[Deletion]:
    """Which manifests the rules delete, oldest first within each rule.

    - ``owned``: sessions this server may delete checkpoints of (it tracks them and no pause or
      resume of theirs is in flight). Other sessions' manifests are never deleted, but their
      blobs count towards ``max_store_bytes``: the store is shared, its bytes are not.
    - ``paused``: sessions whose kernel is gone; the newest *valid* checkpoint of each is their
      only copy of the user's work and survives every rule.
    - ``pinned``: (session, checkpoint) pairs that survive every rule (the checkpoint a
      session's record names, one a resume reads).

    Rules, in order: ``keep_last`` deletes a checkpoint once that many *valid* checkpoints of its
    session are newer (invalid ones are no copy worth keeping, so they do not count);
    ``max_age_days`` deletes those created longer ago; ``max_total_bytes`` deletes a session's
    oldest until the distinct blobs of the rest fit; ``max_store_bytes`` then deletes the oldest
    of all owned sessions until the distinct blobs of every manifest left in the store fit. A
    byte rule that cannot be met with what may be deleted stops there.
    """
    plan = _Plan(entries, owned, paused, pinned)
    for session in plan.sessions():
        if rules.keep_last:
            newer_valid = [0] * len(session)  # valid checkpoints newer than each one
            for i in range(len(session) - 2, -1, -1):
                newer_valid[i] = newer_valid[i + 1] + session[i + 1].valid
            for e, newer in zip(session, newer_valid):
                if newer >= rules.keep_last:
                    plan.delete(e, "keep_last", f"{newer} newer valid checkpoints are kept")
        if rules.max_age_days:
            limit = now - timedelta(days=rules.max_age_days)
            for e in session:
                if e.created < limit:
                    plan.delete(e, "max_age_days", f"older than {rules.max_age_days:g} days")
        if rules.max_total_bytes:
            plan.shrink(session, rules.max_total_bytes, "max_total_bytes", "this session's")
    if rules.max_store_bytes:
        plan.shrink(plan.every, rules.max_store_bytes, "max_store_bytes", "the store's")
    return plan.deleted


class _Plan:
    """The deletions decided so far, and which entries may still be deleted."""

    def __init__(
        self,
        entries: Iterable[Entry],
        owned: Set[str],
        paused: Set[str],
        pinned: Set[tuple[str, str]],
    ) -> None:
        self.every = sorted(entries, key=lambda e: (e.created, e.checkpoint_id))
        self.by_session: dict[str, list[Entry]] = {}
        for e in self.every:
            self.by_session.setdefault(e.session_id, []).append(e)
        self.owned = owned
        self.keep = set(pinned)
        for sid in paused:
            valid = [e for e in self.by_session.get(sid, []) if e.valid]
            if valid:
                self.keep.add(_key(valid[-1]))
        self.gone: set[tuple[str, str]] = set()
        self.deleted: list[Deletion] = []

    def sessions(self) -> list[list[Entry]]:
        """Each owned session's entries, oldest first."""
        return [self.by_session[sid] for sid in sorted(self.by_session) if sid in self.owned]

    def delete(self, e: Entry, rule: str, message: str) -> bool:
        key = _key(e)
        if e.session_id not in self.owned or key in self.keep or key in self.gone:
            return False
        self.gone.add(key)
        self.deleted.append(Deletion(e.session_id, e.checkpoint_id, rule, message))
        return True

    def shrink(self, oldest_first: list[Entry], limit: int, rule: str, whose: str) -> None:
        """Delete the oldest entries that may go until the distinct bytes of the rest fit."""
        usage = _Usage(e for e in oldest_first if _key(e) not in self.gone)
        for e in oldest_first:
            if usage.total <= limit:
                return
            message = (
                f"{whose} checkpoints reference {size_text(usage.total)} of blobs, more than "
                f"{rule} = {size_text(limit)}"
            )
            if self.delete(e, rule, message):
                usage.remove(e)


def _key(e: Entry) -> tuple[str, str]:
    return e.session_id, e.checkpoint_id


class _Usage:
    """Distinct blob bytes of a set of entries, kept up to date as entries leave it."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.refs: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        for e in entries:
            for h, n in e.blobs.items():
                self.refs[h] = self.refs.get(h, 0) + 1
                self.sizes[h] = int(n)
        self.total = sum(self.sizes.values())

    def remove(self, e: Entry) -> None:
        for h in e.blobs:
            self.refs[h] -= 1
            if not self.refs[h]:
                del self.refs[h]
                self.total -= self.sizes.pop(h)
