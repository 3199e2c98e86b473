"""The timing wheel: near timers in memory, far timers in the store, never lost or doubled."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tickwheel.streams.store import MemoryStore, RocksDBStore, StateStore, StoreBatch
from tickwheel.streams.timers import Timer, TimerKind
from tickwheel.streams.wheel import TimingWheel

F = TimerKind.FIRE


class CountingStore(MemoryStore):
    """A MemoryStore that counts the range reads the wheel makes."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def timers_between(self, from_ms: int, until_ms: int, limit: int) -> list[Timer]:
        self.reads += 1
        return super().timers_between(from_ms, until_ms, limit)


def commit(store: StateStore, wheel: TimingWheel, add: set[Timer], remove: set[Timer]) -> None:
    """What the processor does after a Kafka commit: store first, then the wheel."""
    store.apply(StoreBatch({}, add, remove))
    wheel.apply(add, remove)


def test_overdue_timers_are_returned_after_downtime() -> None:
    """Timers long past due (the process was down) come back on the first refill."""
    store = MemoryStore()
    store.apply(StoreBatch({}, {Timer(5, "old", F), Timer(10_000, "recent", F)}, set()))
    wheel = TimingWheel(store)
    assert wheel.refill(1_000_000) == 2
    assert wheel.due(1_000_000) == [Timer(5, "old", F), Timer(10_000, "recent", F)]


def test_refill_loads_only_the_horizon_and_is_free_when_nothing_moved() -> None:
    """refill loads due < now+horizon once; a repeat at the same now reads nothing."""
    store = CountingStore()
    store.apply(StoreBatch({}, {Timer(d, "j", F) for d in (100, 5_000, 5_999, 6_000)}, set()))
    wheel = TimingWheel(store, slot_ms=100, horizon_ms=5_000)
    assert wheel.refill(1_000) == 3
    assert wheel.size() == 3
    reads = store.reads
    assert wheel.refill(1_000) == 0
    assert wheel.refill(999) == 0
    assert store.reads == reads
    assert wheel.refill(1_001) == 1
    assert wheel.size() == 4


def test_ticks_through_an_empty_stretch_read_the_store_once_then_never() -> None:
    """Nothing due for days: one seek learns the next timer; later ticks touch no store."""
    store = CountingStore()
    far = 3 * 86_400_000
    store.apply(StoreBatch({}, {Timer(far, "far", F)}, set()))
    wheel = TimingWheel(store, slot_ms=100, horizon_ms=60_000)
    wheel.refill(0)
    reads = store.reads
    for now in range(100, 100_000, 100):  # a thousand ticks
        wheel.refill(now)
        assert wheel.due(now) == []
    assert store.reads == reads
    # A timer committed inside the stretch (through apply, as every step does) is seen.
    commit(store, wheel, {Timer(150_000, "near", F)}, set())
    wheel.refill(100_000)
    assert wheel.due(150_000) == [Timer(150_000, "near", F)]
    assert wheel.due(far) == [Timer(150_000, "near", F), Timer(far, "far", F)]


def test_due_inside_the_horizon_reads_no_store() -> None:
    """due() within the loaded horizon is answered from memory alone."""
    store = CountingStore()
    store.apply(StoreBatch({}, {Timer(1_500, "j", F)}, set()))
    wheel = TimingWheel(store, horizon_ms=60_000)
    wheel.refill(1_000)
    reads = store.reads
    assert wheel.due(2_000) == [Timer(1_500, "j", F)]
    assert wheel.due(60_999) == [Timer(1_500, "j", F)]
    assert store.reads == reads


def test_bounded_refill_preloads_a_hot_instant_over_several_ticks() -> None:
    """With max_refill, an instant bigger than the bound is loaded in parts, none twice."""
    store = CountingStore()
    hot = {Timer(60_000, f"job-{i:03d}", F) for i in range(250)}
    store.apply(StoreBatch({}, hot, set()))
    wheel = TimingWheel(store, horizon_ms=60_000, max_refill=100)
    assert [wheel.refill(now) for now in (0, 1, 101, 201, 301)] == [0, 100, 100, 50, 0]
    assert wheel.size() == 250
    assert wheel.due(60_000) == sorted(hot, key=Timer.key)


def test_on_load_is_told_each_timer_entering_memory_from_the_store_once() -> None:
    """The hook sees what refill and due() load from the store, never what a step adds."""
    store = MemoryStore()
    hot = {Timer(60_000, f"job-{i:03d}", F) for i in range(250)}
    store.apply(StoreBatch({}, hot | {Timer(200_000, "far", F)}, set()))
    seen: list[Timer] = []
    wheel = TimingWheel(store, horizon_ms=60_000, max_refill=100, on_load=seen.extend)
    for now in (0, 1, 101, 201, 301, 301):
        wheel.refill(now)
    assert sorted(seen, key=Timer.key) == sorted(hot, key=Timer.key)  # each once, in parts
    commit(store, wheel, {Timer(30_000, "added", F)}, set())  # a step's timer: already known
    assert len(seen) == 250
    wheel.due(200_000)  # past the horizon: loads the gap, and says so
    assert seen[-1] == Timer(200_000, "far", F)
    assert len(seen) == 251


def test_timer_added_mid_instant_goes_to_the_right_side_of_the_watermark() -> None:
    """While the watermark sits inside an instant, a new timer there lands once either way."""
    store = MemoryStore()
    store.apply(StoreBatch({}, {Timer(500, f"job-{i}", F) for i in (1, 3, 5, 7)}, set()))
    wheel = TimingWheel(store, horizon_ms=1_000, max_refill=2)
    assert wheel.refill(0) == 2  # job-1, job-3; the watermark is just after job-3 at 500 ms
    commit(store, wheel, {Timer(500, "job-2", F), Timer(500, "job-4", F)}, set())
    assert wheel.size() == 3
    assert [t.job_id for t in wheel.due(500)] == [f"job-{i}" for i in range(1, 6)] + ["job-7"]


def test_due_beyond_the_horizon_is_still_complete() -> None:
    """Asking past the loaded horizon loads the gap first rather than missing timers."""
    store = MemoryStore()
    store.apply(StoreBatch({}, {Timer(100_000, "far", F)}, set()))
    wheel = TimingWheel(store, horizon_ms=1_000)
    wheel.refill(0)
    assert wheel.size() == 0
    assert wheel.due(100_000) == [Timer(100_000, "far", F)]
    assert wheel.refill(50_000) == 0  # already loaded by due()


def test_due_does_not_remove_and_abort_leaves_the_wheel_unchanged() -> None:
    """due() is a read: only apply(removed=...) after a commit takes timers out."""
    store = MemoryStore()
    wheel = TimingWheel(store)
    wheel.refill(0)
    t = Timer(10, "j", F)
    commit(store, wheel, {t}, set())
    assert wheel.due(10) == [t]
    assert wheel.due(10) == [t]  # the step aborted: nothing applied, still due
    commit(store, wheel, set(), {t})
    assert wheel.due(10) == []
    assert wheel.size() == 0


def test_added_timer_inside_horizon_kept_in_memory_outside_left_to_store() -> None:
    """apply keeps a new timer below the watermark and leaves one above it to the store."""
    store = MemoryStore()
    wheel = TimingWheel(store, horizon_ms=1_000)
    wheel.refill(0)
    near, far = Timer(999, "near", F), Timer(1_000, "far", F)
    commit(store, wheel, {near, far}, set())
    assert wheel.size() == 1
    assert wheel.refill(1) == 1
    assert wheel.due(1_000) == [near, far]
    assert wheel.size() == 2


def test_removing_a_timer_above_the_watermark_is_a_no_op() -> None:
    """A removal of a timer the wheel never loaded is mirrored by the store alone."""
    store = MemoryStore()
    wheel = TimingWheel(store, horizon_ms=1_000)
    wheel.refill(0)
    far = Timer(5_000, "far", F)
    commit(store, wheel, {far}, set())
    commit(store, wheel, set(), {far})
    assert wheel.due(10_000) == []


def test_due_orders_by_due_then_key_with_slot_boundaries() -> None:
    """due() is in (due_ms, key) order across and within slots, inclusive of until_ms."""
    store = MemoryStore()
    timers = {
        Timer(199, "b", F),
        Timer(199, "\u00e9", F),
        Timer(199, "a", TimerKind.RETRY, "r-1"),
        Timer(199, "a", F),
        Timer(200, "a", F),
        Timer(100, "z", TimerKind.LEASE, "r-2"),
        Timer(0, "first", F),
    }
    store.apply(StoreBatch({}, timers, set()))
    wheel = TimingWheel(store, slot_ms=100)
    wheel.refill(0)
    assert wheel.due(199) == sorted((t for t in timers if t.due_ms <= 199), key=Timer.key)
    assert wheel.due(200) == sorted(timers, key=Timer.key)
    assert wheel.due(99) == [Timer(0, "first", F)]
    assert wheel.due(-1) == []


def test_next_due_comes_from_memory_then_from_the_store() -> None:
    """next_due_ms is the earliest timer anywhere: memory first, else the store."""
    store = MemoryStore()
    store.apply(StoreBatch({}, {Timer(50, "a", F), Timer(90_000, "b", F)}, set()))
    wheel = TimingWheel(store, horizon_ms=1_000)
    wheel.refill(0)
    assert wheel.next_due_ms() == 50
    commit(store, wheel, set(), {Timer(50, "a", F)})
    assert wheel.next_due_ms() == 90_000
    commit(store, wheel, set(), {Timer(90_000, "b", F)})
    assert wheel.next_due_ms() is None


def test_reset_reloads_after_a_store_rebuild() -> None:
    """After the store is rebuilt behind the wheel's back, reset() makes it exact again."""
    store = MemoryStore()
    wheel = TimingWheel(store)
    store.apply(StoreBatch({}, {Timer(1, "old", F)}, set()))
    wheel.refill(0)
    store.clear()
    store.apply(StoreBatch({}, {Timer(2, "new", F)}, set()))
    wheel.reset()
    assert wheel.due(10) == [Timer(2, "new", F)]


def test_bad_geometry_rejected() -> None:
    """Zero or negative slot, horizon or refill sizes are refused."""
    with pytest.raises(ValueError, match="positive"):
        TimingWheel(MemoryStore(), slot_ms=0)
    with pytest.raises(ValueError, match="positive"):
        TimingWheel(MemoryStore(), horizon_ms=-1)
    with pytest.raises(ValueError, match="positive"):
        TimingWheel(MemoryStore(), max_refill=0)


def test_hot_slot_compaction_keeps_order_and_membership() -> None:
    """Removing most of a big slot compacts its holes without losing or reordering timers."""
    store = MemoryStore()
    wheel = TimingWheel(store, slot_ms=1_000)
    wheel.refill(0)
    timers = [Timer(500 + i // 100, f"job-{i:04d}", F) for i in range(1_000)]
    commit(store, wheel, set(timers), set())
    commit(store, wheel, set(), set(timers[0::2]))
    commit(store, wheel, set(), set(timers[1:900:2]))
    left = timers[901::2]
    assert wheel.due(999) == left
    commit(store, wheel, {timers[0]}, {left[0], left[-1]})
    assert wheel.due(999) == [timers[0], *left[1:-1]]
    assert wheel.size() == len(left) - 1


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_hot_slot_stays_exact_through_holes_compaction_and_readds(data: st.DataObject) -> None:
    """One slot of hundreds of timers stays exact through scattered removals and re-adds."""
    store = MemoryStore()
    wheel = TimingWheel(store, slot_ms=1_000, horizon_ms=10_000)
    wheel.refill(0)
    live = {Timer(500 + i % 7, f"job-{i:04d}", F) for i in range(400)}
    commit(store, wheel, live, set())
    for step in range(data.draw(st.integers(1, 8))):
        pool = sorted(live)
        removed = set(data.draw(st.lists(st.sampled_from(pool), max_size=150))) if pool else set()
        back = set(data.draw(st.lists(st.sampled_from(sorted(removed)), max_size=5))) if removed else set()
        new = {Timer(500 + data.draw(st.integers(0, 9)), f"new-{step}", F)}
        commit(store, wheel, back | new, removed)
        live = (live - removed) | back | new
        assert wheel.due(999) == sorted(live, key=Timer.key)
        assert wheel.size() == len(live)
        assert wheel.next_due_ms() == min(t.due_ms for t in live)


job_ids = st.text(alphabet=st.sampled_from("ab\u00e9\u4e2d\U0001f600\x01"), min_size=1, max_size=4)
any_timer = st.builds(
    Timer,
    due_ms=st.integers(0, 2**64 - 1),
    job_id=job_ids,
    kind=st.sampled_from(list(TimerKind)),
    run_id=st.text(alphabet=st.sampled_from("r-1\u00e9"), max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(any_timer, max_size=20))
def test_timer_field_order_is_key_order(timers: list[Timer]) -> None:
    """Sorting Timers by their fields gives RocksDB key order (the wheel relies on it)."""
    assert sorted(timers) == sorted(timers, key=Timer.key)


# ---------------------------------------------------------------------------
# The wheel against a reference model: a plain set of every committed timer


class WheelMachine(RuleBasedStateMachine):
    """Random adds, removes, fire steps (committed or aborted), clock moves and refills."""

    max_refill: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.store = self.make_store()
        # Small slots and horizon so that slot and watermark boundaries are hit often.
        self.wheel = TimingWheel(self.store, slot_ms=10, horizon_ms=200, max_refill=self.max_refill)
        self.now = 1_000
        self.model: set[Timer] = set()

    def make_store(self) -> StateStore:
        return MemoryStore()

    def commit(self, add: set[Timer], remove: set[Timer]) -> None:
        commit(self.store, self.wheel, add, remove)
        self.model = (self.model - remove) | add

    def expected(self, until_ms: int) -> list[Timer]:
        return sorted((t for t in self.model if t.due_ms <= until_ms), key=Timer.key)

    @rule(
        offsets=st.lists(st.integers(-1_500, 1_500), min_size=1, max_size=5),
        job=job_ids,
        kind=st.sampled_from(list(TimerKind)),
    )
    def add(self, offsets: list[int], job: str, kind: TimerKind) -> None:
        run = "" if kind is F else "r-1"
        self.commit({Timer(max(self.now + o, 0), job, kind, run) for o in offsets}, set())

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        victims = data.draw(st.lists(st.sampled_from(sorted(self.model)), min_size=1, max_size=4))
        keep_one = data.draw(st.booleans())  # also exercise delete-and-add of one timer
        self.commit({victims[0]} if keep_one else set(), set(victims))

    @rule(delta=st.integers(-2, 1), job=job_ids)
    def add_at_watermark(self, delta: int, job: str) -> None:
        """A timer right where memory hands over to the store."""
        self.commit({Timer(max(self.wheel._mark_ms + delta, 0), job, F)}, set())

    @rule()
    def remove_at_watermark(self) -> None:
        """Remove the timers right around the hand-over point."""
        mark = self.wheel._mark_ms
        self.commit(set(), {t for t in self.model if abs(t.due_ms - mark) <= 2})

    @rule(data=st.data(), lookahead=st.integers(0, 300))
    def step(self, data: st.DataObject, lookahead: int) -> None:
        """One processor step: refill, take candidates, then commit or abort."""
        self.wheel.refill(self.now)
        candidates = self.wheel.due(self.now + lookahead)
        assert candidates == self.expected(self.now + lookahead)
        if not candidates:
            return
        fired = set(data.draw(st.lists(st.sampled_from(candidates), max_size=6)))
        if data.draw(st.booleans()):
            later = {
                Timer(t.due_ms + data.draw(st.integers(1, 3_000)), t.job_id, t.kind, t.run_id) for t in fired
            }
            self.commit(later, fired)

    @rule(ms=st.integers(0, 400))
    def advance(self, ms: int) -> None:
        self.now += ms

    @rule()
    def refill(self) -> None:
        self.wheel.refill(self.now)

    @rule(offset=st.integers(-1_500, 2_500))
    def check_due(self, offset: int) -> None:
        got = self.wheel.due(self.now + offset)
        assert len(got) == len(set(got))
        assert got == self.expected(self.now + offset)

    @precondition(lambda self: bool(self.model))
    @rule(data=st.data(), delta=st.integers(-1, 0))
    def check_due_at_a_timer(self, data: st.DataObject, delta: int) -> None:
        """due() exactly at (or just before) a timer's due time, in memory or not."""
        until = data.draw(st.sampled_from(sorted(self.model))).due_ms + delta
        assert self.wheel.due(until) == self.expected(until)

    @invariant()
    def memory_mirrors_the_store_below_the_watermark(self) -> None:
        below = {t for t in self.model if self.wheel._below_mark(t)}
        assert self.wheel.size() == len(below)
        assert self.wheel.next_due_ms() == min((t.due_ms for t in self.model), default=None)

    def teardown(self) -> None:
        self.store.close()


class BoundedWheelMachine(WheelMachine):
    """The same machine with refills of at most 3 timers: the watermark often stops mid-instant."""

    max_refill = 3


class RocksWheelMachine(BoundedWheelMachine):
    """The bounded machine over a real RocksDB store."""

    def make_store(self) -> StateStore:
        self.dir = Path(tempfile.mkdtemp(prefix="wheel-"))
        return RocksDBStore(self.dir / "s")

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_wheel_matches_reference_model() -> None:
    """due(t) always equals the reference's timers <= t, through any mix of operations."""
    run_state_machine_as_test(
        WheelMachine, settings=settings(max_examples=150, stateful_step_count=40, deadline=None)
    )


def test_bounded_refill_wheel_matches_reference_model() -> None:
    """The same holds when refills stop part-way through an instant."""
    run_state_machine_as_test(
        BoundedWheelMachine, settings=settings(max_examples=150, stateful_step_count=40, deadline=None)
    )


def test_wheel_over_rocksdb_matches_reference_model() -> None:
    """The same holds with RocksDB as the far level."""
    run_state_machine_as_test(
        RocksWheelMachine, settings=settings(max_examples=25, stateful_step_count=30, deadline=None)
    )
