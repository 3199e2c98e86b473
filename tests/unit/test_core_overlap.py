"""Overlap policies: an occurrence due while a run of the same job is still in flight."""

from __future__ import annotations

from tests.unit.core_harness import MINUTE, SECOND, T0, Harness, cron
from tickwheel.schemas.model import (
    JobChanged,
    OverlapPolicy,
    RunCancelled,
    RunSettled,
    RunSkipped,
    RunStatus,
    RunTrigger,
    SkipReason,
    run_id_for,
)
from tickwheel.streams.core import BUFFER_CAP, CoreConfig

LONG = CoreConfig(start_timeout_ms=10 * 24 * 3600 * 1000)  # runs stay DUE without a worker


def _job(policy: OverlapPolicy) -> Harness:
    h = Harness(now=T0, cfg=LONG)
    h.create(cron("* * * * *", overlap=policy))
    h.advance(T0)
    h.start(lease_ms=10 * MINUTE)
    return h


def test_overlap_allow_fires_alongside_the_running_run() -> None:
    """allow: the next occurrence fires although the previous run is in flight."""
    h = _job(OverlapPolicy.ALLOW)
    (due,) = h.dues(h.advance(T0 + MINUTE))
    assert due.scheduled_for_ms == T0 + MINUTE
    assert len(h.job.runs) == 2


def test_overlap_skip_skips_while_a_run_is_in_flight() -> None:
    """skip: RunSkipped(overlap) for each occurrence while the run is in flight."""
    h = _job(OverlapPolicy.SKIP)
    events = h.advance(T0 + 2 * MINUTE)
    assert h.dues(events) == []
    skipped = h.of(RunSkipped, events)
    assert [(s.scheduled_for_ms, s.reason) for s in skipped] == [
        (T0 + MINUTE, SkipReason.OVERLAP),
        (T0 + 2 * MINUTE, SkipReason.OVERLAP),
    ]
    assert skipped[0].run_id == run_id_for("job-1", T0 + MINUTE)


def test_overlap_skip_fires_again_once_the_run_settled() -> None:
    """skip only applies while something is in flight."""
    h = _job(OverlapPolicy.SKIP)
    h.succeed()
    assert len(h.dues(h.advance(T0 + MINUTE))) == 1


def test_buffer_one_holds_one_occurrence_and_skips_the_rest() -> None:
    """buffer_one: the first overlapping occurrence is held, the next is RunSkipped(overlap)."""
    h = _job(OverlapPolicy.BUFFER_ONE)
    events = h.advance(T0 + 2 * MINUTE)
    (held,) = h.of(JobChanged, events)
    assert (held.change, held.reason) == ("buffered", str(T0 + MINUTE))
    assert h.job.buffered == (T0 + MINUTE,)
    (skipped,) = h.of(RunSkipped, events)
    assert (skipped.scheduled_for_ms, skipped.reason) == (T0 + 2 * MINUTE, SkipReason.OVERLAP)
    assert "buffer full" in skipped.detail


def test_a_settled_run_releases_the_buffered_occurrence_now() -> None:
    """When the run settles, the first buffered occurrence is dispatched with not_before=now."""
    h = _job(OverlapPolicy.BUFFER_ONE)
    h.advance(T0 + MINUTE + 30 * SECOND)
    events = h.succeed()
    settled, due = h.of(RunSettled, events)[0], h.dues(events)[0]
    assert settled.status is RunStatus.SUCCEEDED
    assert due.run_id == run_id_for("job-1", T0 + MINUTE)
    assert (due.scheduled_for_ms, due.not_before_ms) == (T0 + MINUTE, T0 + MINUTE + 30 * SECOND)
    assert due.trigger is RunTrigger.SCHEDULED
    assert h.job.buffered == ()
    assert h.job.next_fire_ms == T0 + 2 * MINUTE  # releasing does not move the schedule


def test_buffer_all_queues_every_occurrence_and_releases_them_in_order() -> None:
    """buffer_all: occurrences queue up and run one after another, oldest first."""
    h = _job(OverlapPolicy.BUFFER_ALL)
    h.advance(T0 + 3 * MINUTE + SECOND)
    assert h.job.buffered == (T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE)
    released = []
    for _ in range(3):
        released += [d.scheduled_for_ms for d in h.dues(h.succeed())]
        h.start(lease_ms=10 * MINUTE)
    assert released == [T0 + MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE]


def test_buffer_all_is_capped() -> None:
    """buffer_all holds at most BUFFER_CAP occurrences; beyond it they are RunSkipped(overlap)."""
    h = Harness(now=T0, cfg=LONG)
    h.create(cron("* * * * * *", overlap=OverlapPolicy.BUFFER_ALL))  # every second
    h.advance(T0)
    h.start(lease_ms=10 * MINUTE)
    events = h.advance(T0 + (BUFFER_CAP + 5) * SECOND)
    assert len(h.job.buffered) == BUFFER_CAP
    skipped = h.of(RunSkipped, events)
    assert len(skipped) == 5
    assert all(s.reason is SkipReason.OVERLAP and "buffer full" in s.detail for s in skipped)


def test_buffered_occurrences_wait_for_every_in_flight_run() -> None:
    """A buffered occurrence is released only once no run (manual ones included) is in flight."""
    h = _job(OverlapPolicy.BUFFER_ONE)
    h.advance(T0 + MINUTE)
    manual = h.dues(h.trigger())[0].run_id
    scheduled = run_id_for("job-1", T0)
    assert h.dues(h.succeed(scheduled)) == []
    (due,) = h.dues(h.succeed(manual))
    assert due.scheduled_for_ms == T0 + MINUTE


def test_a_buffered_occurrence_is_released_even_when_paused() -> None:
    """An occurrence buffered before a pause was already decided: it still runs."""
    h = _job(OverlapPolicy.BUFFER_ONE)
    h.advance(T0 + MINUTE)
    h.pause()
    assert len(h.dues(h.succeed())) == 1


def test_overlap_cancel_other_cancels_the_running_run_and_fires() -> None:
    """cancel_other: RunCancelled(overlap) + RunSettled(CANCELLED) for the old run, then RunDue."""
    h = _job(OverlapPolicy.CANCEL_OTHER)
    old = h.only_run()
    events = h.advance(T0 + MINUTE)
    cancelled, settled, due = events
    assert cancelled == RunCancelled(old.run_id, "job-1", 1, "overlap", T0 + MINUTE)
    assert isinstance(settled, RunSettled)
    assert settled.status is RunStatus.CANCELLED
    assert due == h.dues(events)[0]
    assert [r.run_id for r in h.job.runs] == [due.run_id]
    assert h.job.consecutive_failures == 0  # a cancellation is not a failure


def test_overlap_policies_do_not_apply_without_a_run_in_flight() -> None:
    """With nothing in flight every policy simply fires."""
    for policy in OverlapPolicy:
        h = Harness(now=T0, cfg=LONG)
        h.create(cron("* * * * *", overlap=policy))
        events = h.advance(T0 + MINUTE, succeed_runs=True)
        assert [d.scheduled_for_ms for d in h.dues(events)] == [T0, T0 + MINUTE], policy
