"""The hierarchical timing wheel: memory for the near future, the state store for the far.

The near level is a map of slots (``due_ms // slot_ms``) holding every timer below the
*watermark*, plus a sorted list of the non-empty slot indices; the far level is the store's
time-ordered timer keyspace. The invariant that makes it exact::

    memory == { t in store : t.key() < watermark }

The watermark is a key: normally the start of a millisecond, but a bounded refill may stop
in the middle of a hot instant and resume there on the next tick.

``refill(now)`` moves the watermark towards ``now + horizon``, loading only the store range it
crosses: O(entries loaded), and free when the horizon has not moved past new entries. When a
crossed range held nothing, one more seek learns when the store's next timer is due (the
*store floor*); until the horizon reaches it, ticks move the watermark without reading the
store at all, so a tick with nothing due costs the same at 10 thousand or 10 million timers.
Every timer added above the watermark passes through ``apply``, which lowers the floor.
``apply`` mirrors a committed store batch, keeping only timers below the watermark, so a timer
is either in memory or waiting in the store above the watermark, never both, never neither.

Timers leave memory only through ``apply(removed=...)`` after the store commit, never through
``due``: a step whose Kafka transaction aborts leaves the wheel as it was.

The wheel is pure apart from the store it reads: time is always an argument.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from tickwheel.streams.store import StateStore
from tickwheel.streams.timers import Timer, due_prefix

# timers_between needs a limit; the wheel wants the whole range it crosses.
_ALL = 1 << 62
# One past the largest due time a timer key can hold (unsigned 64-bit milliseconds).
_NEVER_MS = 1 << 64
# Field order is key order (UTF-8 preserves code point order and job ids hold no NUL, the
# key's separator); attrgetter builds the tuples in C, many times faster than Timer.__lt__.
_KEY_ORDER = attrgetter("due_ms", "job_id", "kind", "run_id")
# A slot compacts its holes once they outnumber its live timers (and this many).
_MIN_HOLES = 64


def _due_ms(timer: Timer) -> int:
    return timer.due_ms


class _Slot:
    """One slot's timers as a key-ordered list with holes, so that a hot instant of a million
    timers costs O(1) per removal and a C-speed copy per ``due()``, never a re-sort per step.

    ``entries`` is in key order with ``None`` where a timer was removed; ``where`` maps each
    live timer to its position. Additions arrive in key order from the store; one that does
    not (a timer added by a step) marks the slot for one re-sort at the next read.
    """

    __slots__ = ("entries", "holes", "in_order", "tail", "where")

    def __init__(self) -> None:
        self.entries: list[Timer | None] = []
        self.where: dict[Timer, int] = {}
        self.holes = 0
        self.in_order = True
        self.tail: tuple[int, str, str, str] = (0, "", "", "")  # key of the last entry

    def __len__(self) -> int:
        return len(self.where)

    def add(self, timer: Timer) -> bool:
        if timer in self.where:
            return False
        key = _KEY_ORDER(timer)
        if self.in_order and self.entries:
            # The last entry (live or a hole) is the greatest while the list is in order.
            self.in_order = self.tail < key
        self.tail = key
        self.where[timer] = len(self.entries)
        self.entries.append(timer)
        return True

    def discard(self, timer: Timer) -> bool:
        position = self.where.pop(timer, None)
        if position is None:
            return False
        self.entries[position] = None
        self.holes += 1
        if self.holes > max(len(self.where), _MIN_HOLES):
            self._rebuild()
        return True

    def live(self) -> Iterator[Timer]:
        """The live timers in key order."""
        if not self.in_order:
            self._rebuild()
        return filter(None, self.entries)

    def _rebuild(self) -> None:
        """Drop the holes and restore key order."""
        if self.in_order:
            ordered: list[Timer] = list(filter(None, self.entries))
        else:
            ordered = sorted(self.where, key=_KEY_ORDER)
        self.entries = list(ordered)
        self.where = {t: i for i, t in enumerate(ordered)}
        self.holes = 0
        self.in_order = True
        if ordered:
            self.tail = _KEY_ORDER(ordered[-1])


class TimingWheel:
    """Near-future timers in ``slot_ms`` slots for the next ``horizon_ms``, over a store.

    ``max_refill`` bounds the timers one :meth:`refill` loads, so that a hot instant of a
    million timers entering the horizon is preloaded over several ticks instead of stalling
    one; ``None`` loads everything at once. :meth:`due` is complete either way.
    ``on_load`` is told of every batch of timers loaded from the store (those entering the
    horizon), in the thread that called :meth:`refill` or :meth:`due`.
    """

    def __init__(
        self,
        store: StateStore,
        *,
        slot_ms: int = 100,
        horizon_ms: int = 60_000,
        max_refill: int | None = None,
        on_load: Callable[[list[Timer]], None] | None = None,
    ) -> None:
        if slot_ms <= 0 or horizon_ms <= 0 or (max_refill is not None and max_refill <= 0):
            raise ValueError("slot_ms, horizon_ms and max_refill must be positive")
        self._store = store
        self._slot_ms = slot_ms
        self._horizon_ms = horizon_ms
        self._max_refill = _ALL if max_refill is None else max_refill
        self._on_load = on_load
        self.reset()

    def reset(self) -> None:
        """Forget memory and reload from the store on the next call (after a store rebuild)."""
        self._slots: dict[int, _Slot] = {}
        self._indices: list[int] = []  # sorted indices of the non-empty slots
        self._size = 0
        # The watermark: every store timer due before _mark_ms is in memory, and of those due
        # at _mark_ms the ones with key < _mark_key (none when _mark_key is None).
        self._mark_ms = 0
        self._mark_key: bytes | None = None
        # No store timer above the watermark is due before this (None: not known).
        self._store_floor_ms: int | None = None

    def refill(self, now_ms: int) -> int:
        """Load the store's timers due before ``now_ms + horizon_ms`` not yet in memory, at
        most ``max_refill`` of them (the rest on later calls).

        Returns the number loaded. The first call also loads everything overdue.
        """
        return self._load_until(now_ms + self._horizon_ms, self._max_refill)

    def due(self, until_ms: int) -> list[Timer]:
        """Every timer with ``due_ms <= until_ms``, ordered by (due_ms, key); removes nothing.

        Cost is O(timers returned + slots they occupy). Asking beyond the watermark first
        loads the missing range from the store, so the answer is complete either way.
        """
        self._load_until(until_ms + 1, _ALL)
        last = until_ms // self._slot_ms
        indices = self._indices[: bisect.bisect_right(self._indices, last)]
        out: list[Timer] = []
        for index in indices:
            out.extend(self._slots[index].live())
        if indices and indices[-1] == last:
            # Only the last slot can hold timers past until_ms, and they sort at its end.
            tail = len(out) - len(self._slots[last])
            del out[bisect.bisect_right(out, until_ms, lo=tail, key=_due_ms) :]
        return out

    def apply(self, added: Iterable[Timer], removed: Iterable[Timer]) -> None:
        """Mirror a committed store batch: removals first, then additions below the watermark."""
        for timer in removed:
            if self._below_mark(timer):
                self._discard(timer)
        for timer in added:
            if self._below_mark(timer):
                self._add(timer)
            elif self._store_floor_ms is not None and timer.due_ms < self._store_floor_ms:
                self._store_floor_ms = timer.due_ms

    def size(self) -> int:
        """The number of timers in memory."""
        return self._size

    def next_due_ms(self) -> int | None:
        """The earliest due time of any timer, from memory or else from the store."""
        if self._indices:
            return next(self._slots[self._indices[0]].live()).due_ms
        return self._store.next_due_ms()

    # -- internals ---------------------------------------------------------------------

    def _below_mark(self, timer: Timer) -> bool:
        if timer.due_ms != self._mark_ms:
            return timer.due_ms < self._mark_ms
        return self._mark_key is not None and timer.key() < self._mark_key

    def _load_until(self, until_ms: int, limit: int) -> int:
        """Move the watermark towards ``until_ms``, loading at most ``limit`` timers."""
        if until_ms <= self._mark_ms:
            return 0
        if self._store_floor_ms is not None and until_ms <= self._store_floor_ms:
            self._mark_ms, self._mark_key = until_ms, None  # the store has nothing before it
            return 0
        start = due_prefix(self._mark_ms) if self._mark_key is None else self._mark_key
        loaded = self._store.timers_from(start, until_ms, limit)
        for timer in loaded:
            self._add(timer)
        if loaded and self._on_load is not None:
            self._on_load(loaded)
        if len(loaded) < limit:
            self._mark_ms, self._mark_key = until_ms, None
            # An empty range means a sparse stretch: learn where it ends (one seek), then
            # skip the store until the horizon gets there. A dense stretch keeps one seek
            # per tick, as before.
            self._store_floor_ms = self._next_store_due(until_ms) if not loaded else None
        else:
            # There may be more: stop right after the last key read (its smallest successor).
            last = loaded[-1]
            self._mark_ms, self._mark_key = last.due_ms, last.key() + b"\x00"
            self._store_floor_ms = None
        return len(loaded)

    def _next_store_due(self, from_ms: int) -> int:
        """When the store's first timer due at or after ``from_ms`` is due (far future if none)."""
        first = self._store.timers_between(from_ms, _NEVER_MS, 1)
        return first[0].due_ms if first else _NEVER_MS

    def _add(self, timer: Timer) -> None:
        index = timer.due_ms // self._slot_ms
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot()
            bisect.insort(self._indices, index)
        if slot.add(timer):
            self._size += 1

    def _discard(self, timer: Timer) -> None:
        index = timer.due_ms // self._slot_ms
        slot = self._slots.get(index)
        if slot is None or not slot.discard(timer):
            return
        self._size -= 1
        if not slot:
            del self._slots[index]
            del self._indices[bisect.bisect_left(self._indices, index)]
