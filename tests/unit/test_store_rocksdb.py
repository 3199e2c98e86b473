"""RocksDBStore against the shared StateStore contract, plus what only a disk store has."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Rdict, WriteBatch

from tests.unit.store_contract import StoreContract, batch
from tickwheel.streams.store import RocksDBStore, StateStore
from tickwheel.streams.timers import Timer, TimerKind

F = TimerKind.FIRE


@pytest.fixture
def rocks(tmp_path: Path) -> Iterator[RocksDBStore]:
    """A fresh RocksDBStore under the test's temporary directory."""
    store = RocksDBStore(tmp_path / "state")
    yield store
    store.close()


class TestRocksDBStore(StoreContract):
    """The RocksDB store passes the whole contract; its counts are estimates."""

    exact_counts = False

    @pytest.fixture
    def store(self, rocks: RocksDBStore) -> StateStore:
        return rocks


class _WriteSpy:
    """Stands in for the Rdict: counts write() calls and can make them fail."""

    def __init__(self, db: Rdict, *, fail: bool = False) -> None:
        self.db = db
        self.fail = fail
        self.batches: list[int] = []

    def write(self, wb: WriteBatch, opts: Any = None) -> None:
        self.batches.append(wb.len())
        if self.fail:
            raise OSError("disk on fire")
        self.db.write(wb, opts)

    def close(self) -> None:
        self.db.close()


def _spy(store: RocksDBStore, *, fail: bool = False) -> _WriteSpy:
    """Route the store's writes through a spy; the spy closes the real database."""
    assert store._h is not None
    spy = _WriteSpy(store._h.db, fail=fail)
    store._h = dataclasses.replace(store._h, db=spy)  # type: ignore[arg-type]
    return spy


def test_apply_is_one_write_batch(rocks: RocksDBStore) -> None:
    """apply() issues exactly one WriteBatch holding jobs, timers and the offset together."""
    spy = _spy(rocks)
    rocks.apply(
        batch(
            {"a": b"1", "b": None},
            add={Timer(1, "a", F), Timer(2, "a", F)},
            delete={Timer(0, "a", F)},
            offset=10,
        )
    )
    assert spy.batches == [2 + 2 + 1 + 1]
    assert rocks.changelog_offset() == 10


def test_failed_write_leaves_nothing(rocks: RocksDBStore) -> None:
    """If the one WriteBatch fails, no job, timer or offset of the batch is visible."""
    rocks.apply(batch({"keep": b"1"}, offset=3))
    spy = _spy(rocks, fail=True)
    with pytest.raises(OSError, match="disk on fire"):
        rocks.apply(batch({"a": b"1", "keep": None}, add={Timer(1, "a", F)}, offset=4))
    assert spy.batches == [4]  # a, keep, one timer, the offset
    assert rocks.get_many(["a", "keep"]) == {"keep": b"1"}
    assert rocks.due(10, 10) == []
    assert rocks.changelog_offset() == 3


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    """Jobs, timers and the changelog offset survive close and reopen."""
    store = RocksDBStore(tmp_path / "s")
    store.apply(batch({"caf\u00e9": b"v"}, add={Timer(2**40, "caf\u00e9", F)}, offset=42))
    store.close()
    again = RocksDBStore(tmp_path / "s")
    try:
        assert again.get("caf\u00e9") == b"v"
        assert again.due(2**41, 10) == [Timer(2**40, "caf\u00e9", F)]
        assert again.changelog_offset() == 42
    finally:
        again.close()


def test_clear_survives_reopen(tmp_path: Path) -> None:
    """A cleared store reopens empty, with no changelog offset."""
    store = RocksDBStore(tmp_path / "s")
    store.apply(batch({"a": b"v"}, add={Timer(1, "a", F)}, offset=42))
    store.clear()
    store.close()
    again = RocksDBStore(tmp_path / "s")
    try:
        assert (again.get("a"), again.due(10, 10), again.changelog_offset()) == (None, [], None)
    finally:
        again.close()


def test_column_families(tmp_path: Path) -> None:
    """The store keeps jobs, timers and meta in their own column families."""
    RocksDBStore(tmp_path / "s").close()
    assert {"jobs", "timers", "meta"} <= set(Rdict.list_cf(str(tmp_path / "s")))


def test_half_consumed_iter_jobs_does_not_block_close(tmp_path: Path) -> None:
    """An abandoned iter_jobs generator holds no iterator, so the store closes and reopens."""
    store = RocksDBStore(tmp_path / "s")
    store.apply(batch({f"j{i:05d}": b"v" for i in range(3_000)}))
    jobs = store.iter_jobs()
    next(jobs)
    store.close()
    RocksDBStore(tmp_path / "s").close()


def test_timer_added_below_a_scanned_range_is_found(rocks: RocksDBStore) -> None:
    """Scans that found nothing do not hide a timer later added earlier than they looked."""
    rocks.apply(batch(add={Timer(1_000, "a", F)}))
    rocks.apply(batch(delete={Timer(1_000, "a", F)}))
    assert rocks.due(5_000, 10) == []
    assert rocks.next_due_ms() is None
    rocks.apply(batch(add={Timer(10, "b", F)}))
    assert rocks.due(5_000, 10) == [Timer(10, "b", F)]
    assert rocks.timers_between(0, 11, 10) == [Timer(10, "b", F)]


def test_due_after_many_fired_timers(rocks: RocksDBStore) -> None:
    """Fire-and-delete churn (a queue of tombstones) still leaves due() exact."""
    for start in range(0, 5_000, 500):
        fired = {Timer(d, f"j{d}", F) for d in range(start, start + 500)}
        rocks.apply(batch(add=fired))
        assert rocks.due(start + 499, 1_000) == sorted(fired)
        rocks.apply(batch(delete=fired))
    rocks.apply(batch(add={Timer(4_000, "late", F)}))
    assert rocks.due(10_000, 10) == [Timer(4_000, "late", F)]


def test_usable_from_another_thread(rocks: RocksDBStore) -> None:
    """The store opened on one thread works from the processor's dedicated thread."""
    errors: list[BaseException] = []

    def work() -> None:
        try:
            rocks.apply(batch({"t": b"1"}, add={Timer(1, "t", F)}))
            assert rocks.due(1, 1) == [Timer(1, "t", F)]
        except BaseException as exc:  # handed back to the test thread
            errors.append(exc)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(timeout=30)
    assert errors == []
    assert rocks.get("t") == b"1"
