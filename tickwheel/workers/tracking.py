"""Pure bookkeeping of a pool consumer: committable offsets, started attempts, cancels.

Offsets (at-least-once). A RunDue's offset stays *held* from the moment it is consumed
until its lease is acknowledged (or the run is dropped: cancelled, stale, refused). The
committable offset of a partition is ``min(held offsets, consumed position)``, so a crash
or a rebalance redelivers every run whose lease was not yet on the broker, and nothing
else. What that window lets through, and why it is harmless, is in ``pool.py``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class OffsetLedger(Generic[K]):
    """Per partition: held offsets, consumed position, last committed offset."""

    def __init__(self) -> None:
        self._held: dict[K, set[int]] = {}
        self._position: dict[K, int] = {}
        self._committed: dict[K, int] = {}

    def hold(self, tp: K, offset: int) -> None:
        self._held.setdefault(tp, set()).add(offset)

    def release(self, tp: K, offset: int) -> None:
        self._held.get(tp, set()).discard(offset)

    def held(self, tp: K) -> int:
        return len(self._held.get(tp, ()))

    def consumed(self, tp: K, position: int) -> None:
        """The consumer's position (next offset it will return) after records were handled."""
        self._position[tp] = position

    def commit_point(self, tp: K) -> int | None:
        if tp not in self._position:
            return None
        position = self._position[tp]
        held = self._held.get(tp)
        return position if not held else min(position, sorted(held)[0])

    def to_commit(self) -> dict[K, int]:
        """Partitions whose commit point moved past what was last committed."""
        points = {tp: self.commit_point(tp) for tp in self._position}
        return {tp: p for tp, p in points.items() if p is not None and p != self._committed.get(tp)}

    def committed(self, tp: K, offset: int) -> None:
        self._committed[tp] = offset

    def reset(self, tp: K) -> None:
        """A new assignment: the consumer restarts from the group's offset, re-learn it."""
        self._position.pop(tp, None)
        self._committed.pop(tp, None)

    def forget(self, tp: K) -> None:
        """The partition went to another member: nothing of it is ours any more."""
        self.reset(tp)
        self._held.pop(tp, None)


class RecentSet(Generic[K]):
    """The last ``capacity`` keys added (LRU), for deduplication."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._keys: OrderedDict[K, None] = OrderedDict()

    def add(self, key: K) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self.capacity:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


class CancelMemory:
    """Which attempts of which runs were cancelled: a RunCancelled covers its attempt and older."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._runs: OrderedDict[str, int] = OrderedDict()

    def record(self, run_id: str, attempt: int) -> None:
        self._runs[run_id] = max(attempt, self._runs.get(run_id, attempt))
        self._runs.move_to_end(run_id)
        while len(self._runs) > self.capacity:
            self._runs.popitem(last=False)

    def cancelled(self, run_id: str, attempt: int) -> bool:
        return attempt <= self._runs.get(run_id, 0)
