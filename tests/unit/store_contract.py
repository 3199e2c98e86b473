"""The StateStore contract: one abstract suite that every store implementation must pass.

A test module subclasses :class:`StoreContract` and provides a ``store`` fixture.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwheel.streams.store import StateStore, StoreBatch, StoreClosedError
from tickwheel.streams.timers import Timer, TimerKind

F = TimerKind.FIRE

# Job ids from the alphabet that matters for byte order: ASCII, 2-, 3- and 4-byte UTF-8.
job_ids = st.text(alphabet=st.sampled_from("ab\u00e9\u4e2d\U0001f600-_"), min_size=1, max_size=4)
timers = st.builds(
    Timer,
    due_ms=st.one_of(st.integers(0, 2_000), st.sampled_from([255, 256, 2**32, 2**56, 2**64 - 1])),
    job_id=job_ids,
    kind=st.sampled_from(list(TimerKind)),
    run_id=st.sampled_from(["", "r-1", "r-\u00e9"]),
)


def batch(
    jobs: dict[str, bytes | None] | None = None,
    add: set[Timer] | None = None,
    delete: set[Timer] | None = None,
    offset: int | None = None,
) -> StoreBatch:
    """A StoreBatch with empty defaults, to keep tests short."""
    return StoreBatch(jobs or {}, add or set(), delete or set(), offset)


class StoreContract:
    """Behaviour every StateStore must have. Subclasses provide the ``store`` fixture."""

    # RocksDB's key counts are estimates that over-count overwrites and deletes.
    exact_counts: ClassVar[bool] = True

    def test_is_a_state_store(self, store: StateStore) -> None:
        """The implementation satisfies the StateStore protocol."""
        assert isinstance(store, StateStore)

    def test_empty_store(self, store: StateStore) -> None:
        """A new store has no jobs, no timers and no changelog offset."""
        assert store.get("x") is None
        assert store.get_many(["x", "y"]) == {}
        assert store.due(2**63, 10) == []
        assert store.next_due_ms() is None
        assert store.changelog_offset() is None
        assert list(store.iter_jobs()) == []
        assert (store.count_jobs(), store.count_timers()) == (0, 0)

    def test_timer_team_is_kept_as_the_index_value(self, store: StateStore) -> None:
        """A timer comes back from the index with its team, which admission uses."""
        timer = Timer(5, "job-1", TimerKind.FIRE, team="payments")
        store.apply(StoreBatch(timers_add={timer}))
        (back,) = store.due(10, 10)
        assert back == timer
        assert back.team == "payments"

    def test_put_get_delete_job(self, store: StateStore) -> None:
        """A job put is readable, overwritten by the next put and removed by None."""
        store.apply(batch({"a": b"1", "b": b"2"}))
        store.apply(batch({"a": b"3"}))
        assert store.get("a") == b"3"
        store.apply(batch({"a": None, "never-existed": None}))
        assert store.get("a") is None
        assert store.get("b") == b"2"

    def test_get_many_omits_absent_ids(self, store: StateStore) -> None:
        """get_many returns only the present ids and accepts any iterable, even empty."""
        store.apply(batch({"a": b"1", "c": b""}))
        assert store.get_many(iter(["a", "b", "c"])) == {"a": b"1", "c": b""}
        assert store.get_many([]) == {}

    def test_unicode_job_ids(self, store: StateStore) -> None:
        """Job ids and run ids outside ASCII round-trip through jobs and timers."""
        ids = ["caf\u00e9", "\u4e2d\u6587", "emoji-\U0001f600", "a\u0301"]
        store.apply(batch({j: j.encode() for j in ids}, add={Timer(5, j, F, "r-\u00e9") for j in ids}))
        assert store.get_many(ids) == {j: j.encode() for j in ids}
        assert dict(store.iter_jobs()) == {j: j.encode() for j in ids}
        assert {t.job_id for t in store.due(5, 10)} == set(ids)
        assert all(t.run_id == "r-\u00e9" for t in store.due(5, 10))

    def test_iter_jobs_in_byte_order_across_chunks(self, store: StateStore) -> None:
        """iter_jobs yields every job once, in UTF-8 byte order, also past one read chunk."""
        ids = [f"job-{i:05d}" for i in range(2_500)] + ["\u00e9", "z", "Z"]
        store.apply(batch({j: j.encode() for j in ids}))
        assert [j for j, _ in store.iter_jobs()] == sorted(ids, key=str.encode)

    def test_apply_is_atomic_when_a_value_is_bad(self, store: StateStore) -> None:
        """A batch that fails part-way (a non-bytes state) leaves nothing of itself behind."""
        store.apply(batch({"keep": b"1"}, add={Timer(1, "keep", F)}, offset=7))
        bad: dict[str, Any] = {"a": b"1", "b": "not bytes", "keep": None}
        with pytest.raises(TypeError):
            store.apply(batch(bad, add={Timer(2, "a", F)}, delete={Timer(1, "keep", F)}, offset=9))
        self._assert_only_keep(store)

    def test_apply_is_atomic_when_a_timer_is_bad(self, store: StateStore) -> None:
        """A batch with an unencodable timer (negative due time) writes none of its parts."""
        store.apply(batch({"keep": b"1"}, add={Timer(1, "keep", F)}, offset=7))
        bad_timers = {Timer(2, "a", F), Timer(-1, "b", F), Timer(3, "c", F)}
        with pytest.raises(struct.error):
            store.apply(batch({"a": b"1", "keep": None}, add=bad_timers, offset=9))
        self._assert_only_keep(store)

    def test_apply_is_atomic_when_a_job_id_is_unencodable(self, store: StateStore) -> None:
        """A job id that is not valid UTF-8 (a lone surrogate) fails the whole batch."""
        store.apply(batch({"keep": b"1"}, add={Timer(1, "keep", F)}, offset=7))
        with pytest.raises(UnicodeEncodeError):
            store.apply(batch({"a": b"1", "\ud800": b"2", "keep": None}, offset=9))
        self._assert_only_keep(store)

    @staticmethod
    def _assert_only_keep(store: StateStore) -> None:
        assert store.get_many(["a", "b", "c", "keep"]) == {"keep": b"1"}
        assert store.due(10, 10) == [Timer(1, "keep", F)]
        assert store.changelog_offset() == 7

    def test_changelog_offset_set_and_kept(self, store: StateStore) -> None:
        """The offset is set by batches that carry one and kept by batches that do not."""
        store.apply(batch(offset=0))
        assert store.changelog_offset() == 0
        store.apply(batch({"a": b"1"}, offset=2**40))
        store.apply(batch({"b": b"1"}))
        assert store.changelog_offset() == 2**40

    def test_negative_offset_rejected(self, store: StateStore) -> None:
        """A negative changelog offset is an error and writes nothing."""
        with pytest.raises(ValueError, match="offset"):
            store.apply(batch({"a": b"1"}, offset=-1))
        assert store.get("a") is None

    def test_due_is_inclusive_ordered_and_limited(self, store: StateStore) -> None:
        """due(T) returns timers with due_ms <= T in key order, at most ``limit``."""
        ts = {Timer(d, j, F) for d in (10, 20, 21, 30) for j in ("b", "a")}
        store.apply(batch(add=ts))
        assert store.due(20, 100) == sorted(t for t in ts if t.due_ms <= 20)
        assert store.due(20, 3) == [Timer(10, "a", F), Timer(10, "b", F), Timer(20, "a", F)]
        assert store.due(9, 100) == []
        assert store.due(30, 0) == []
        assert store.due(-5, 10) == []

    def test_timers_between_is_half_open(self, store: StateStore) -> None:
        """timers_between(a, b) returns a <= due_ms < b, in key order, at most ``limit``."""
        store.apply(batch(add={Timer(d, "j", F) for d in (5, 10, 15, 20)}))
        assert [t.due_ms for t in store.timers_between(10, 20, 10)] == [10, 15]
        assert [t.due_ms for t in store.timers_between(0, 2**70, 10)] == [5, 10, 15, 20]
        assert [t.due_ms for t in store.timers_between(6, 21, 1)] == [10]
        assert store.timers_between(20, 20, 10) == []
        assert store.timers_between(21, 10, 10) == []

    def test_timers_from_resumes_mid_instant(self, store: StateStore) -> None:
        """timers_from(key) starts at that key, inside an instant, and stops before until_ms."""
        ts = [Timer(5, j, F) for j in ("a", "b", "c")] + [Timer(6, "a", F), Timer(9, "z", F)]
        store.apply(batch(add=set(ts)))
        assert store.timers_from(ts[0].key() + b"\x00", 9, 10) == ts[1:4]
        assert store.timers_from(ts[1].key(), 7, 2) == ts[1:3]
        assert store.timers_from(b"", 2**64, 10) == ts
        assert store.timers_from(ts[4].key() + b"\x00", 2**64, 10) == []
        assert store.timers_from(ts[0].key(), 5, 10) == []

    def test_timer_order_across_be64_bytes(self, store: StateStore) -> None:
        """Due times that differ only in high bytes sort numerically, not by low bytes."""
        dues = [2**64 - 1, 2**56, 2**56 - 1, 2**40 + 1, 2**32, 65_536, 65_535, 256, 255, 1, 0]
        store.apply(batch(add={Timer(d, "\u00e9" if d % 2 else "a", F) for d in dues}))
        assert [t.due_ms for t in store.due(2**64, 100)] == sorted(dues)
        assert [t.due_ms for t in store.due(2**56, 100)] == sorted(d for d in dues if d <= 2**56)
        assert store.next_due_ms() == 0

    def test_same_due_orders_by_job_then_kind_then_run(self, store: StateStore) -> None:
        """At one instant, timers come in job-id, then kind, then run-id byte order."""
        ts = [
            Timer(7, "a", TimerKind.FIRE),
            Timer(7, "a", TimerKind.LEASE, "r-1"),
            Timer(7, "a", TimerKind.LEASE, "r-2"),
            Timer(7, "a", TimerKind.RETRY, "r-1"),
            Timer(7, "ab", TimerKind.FIRE),
            Timer(7, "b", TimerKind.FIRE),
            Timer(7, "\u00e9", TimerKind.FIRE),
        ]
        store.apply(batch(add=set(ts)))
        assert store.due(7, 10) == ts

    def test_delete_then_add_in_one_batch_keeps_the_timer(self, store: StateStore) -> None:
        """A timer in both timers_del and timers_add of one batch ends up present."""
        t = Timer(3, "a", F)
        store.apply(batch(add={t}, delete={t}))
        assert store.due(3, 10) == [t]
        store.apply(batch(delete={t, Timer(4, "absent", F)}))
        assert store.due(3, 10) == []

    def test_next_due_follows_deletes_and_adds(self, store: StateStore) -> None:
        """next_due_ms tracks the earliest remaining timer through deletes and re-adds."""
        store.apply(batch(add={Timer(50, "a", F), Timer(60, "b", F)}))
        assert store.next_due_ms() == 50
        store.apply(batch(delete={Timer(50, "a", F)}))
        assert store.next_due_ms() == 60
        assert store.due(55, 10) == []
        store.apply(batch(add={Timer(1, "c", F)}))
        assert store.next_due_ms() == 1
        assert store.due(55, 10) == [Timer(1, "c", F)]

    def test_counts_after_fresh_inserts(self, store: StateStore) -> None:
        """Counts are exact after inserts of distinct keys (even where they are estimates)."""
        store.apply(batch({f"j{i}": b"x" for i in range(300)}, add={Timer(i, "j", F) for i in range(40)}))
        assert (store.count_jobs(), store.count_timers()) == (300, 40)

    def test_counts_after_overwrites_and_deletes(self, store: StateStore) -> None:
        """Exact stores count overwrites and deletes exactly; estimates never go below zero."""
        store.apply(batch({"a": b"1", "b": b"1"}, add={Timer(1, "a", F)}))
        store.apply(batch({"a": b"2", "b": None}, delete={Timer(1, "a", F)}))
        if self.exact_counts:
            assert (store.count_jobs(), store.count_timers()) == (1, 0)
        else:
            assert store.count_jobs() >= 0
            assert store.count_timers() >= 0

    def test_clear_drops_everything_and_store_stays_usable(self, store: StateStore) -> None:
        """clear removes jobs, timers and the offset; the store accepts writes afterwards."""
        store.apply(batch({"a": b"1"}, add={Timer(1, "a", F)}, offset=5))
        store.clear()
        assert store.get("a") is None
        assert store.due(2**63, 10) == []
        assert store.next_due_ms() is None
        assert store.changelog_offset() is None
        assert (store.count_jobs(), store.count_timers()) == (0, 0)
        store.apply(batch({"b": b"2"}, add={Timer(2, "b", F)}, offset=1))
        assert (store.get("b"), store.due(2, 10), store.changelog_offset()) == (
            b"2",
            [Timer(2, "b", F)],
            1,
        )

    def test_use_after_close_raises(self, store: StateStore) -> None:
        """After close every call raises StoreClosedError, and close may be repeated."""
        store.close()
        store.close()
        with pytest.raises(StoreClosedError):
            store.get("a")
        with pytest.raises(StoreClosedError):
            store.due(1, 1)
        with pytest.raises(StoreClosedError):
            store.apply(batch({"a": b"1"}))

    @settings(
        max_examples=60,
        deadline=None,
        # The store fixture is cleared at the start of each example; and each subclass is a
        # different executor on purpose (one per store implementation).
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors],
    )
    @given(
        steps=st.lists(
            st.tuples(
                st.dictionaries(job_ids, st.one_of(st.none(), st.binary(max_size=4)), max_size=4),
                st.sets(timers, max_size=6),
                st.sets(timers, max_size=3),
            ),
            max_size=8,
        ),
        until=st.integers(0, 2**64),
        since=st.integers(0, 2_000),
        limit=st.integers(0, 12),
    )
    def test_matches_a_dict_model(
        self,
        store: StateStore,
        steps: list[tuple[dict[str, bytes | None], set[Timer], set[Timer]]],
        until: int,
        since: int,
        limit: int,
    ) -> None:
        """After random batches the store answers exactly like a dict plus a sorted set."""
        store.clear()
        jobs: dict[str, bytes] = {}
        live: set[Timer] = set()
        for job_changes, add, delete in steps:
            store.apply(batch(dict(job_changes), add=add, delete=delete))
            for job_id, value in job_changes.items():
                if value is None:
                    jobs.pop(job_id, None)
                else:
                    jobs[job_id] = value
            live = (live - delete) | add
        ordered = sorted(live, key=Timer.key)
        assert dict(store.iter_jobs()) == jobs
        assert store.due(until, limit) == [t for t in ordered if t.due_ms <= until][:limit]
        assert (
            store.timers_between(since, until, limit)
            == [t for t in ordered if since <= t.due_ms < until][:limit]
        )
        assert store.next_due_ms() == (ordered[0].due_ms if ordered else None)
        start = ordered[len(ordered) // 2].key() + b"\x00" if ordered else b""
        assert (
            store.timers_from(start, until, limit)
            == [t for t in ordered if t.key() >= start and t.due_ms < until][:limit]
        )
