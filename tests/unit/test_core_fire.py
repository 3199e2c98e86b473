"""decide/evolve for FIRE timers: dispatch, look-ahead, spread, catch-up, budget, DST."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pytest

from tests.unit.core_harness import DAY, HOUR, MINUTE, SECOND, T0, Harness, cron, spec
from tickwheel.schemas.model import (
    CatchupPolicy,
    CronSchedule,
    FoldPolicy,
    GapPolicy,
    JobStatus,
    OverlapPolicy,
    RunSkipped,
    RunTrigger,
    SkipReason,
    run_id_for,
)
from tickwheel.streams.core import CoreConfig, Event, start_deadline_ms
from tickwheel.streams.schedule import offset_ms
from tickwheel.streams.timers import Timer, TimerKind

NY = "America/New_York"


def utc(year: int, month: int, day: int, hour: int, minute: int) -> int:
    """Epoch ms of a UTC wall time."""
    return int(datetime(year, month, day, hour, minute, tzinfo=UTC).timestamp() * 1000)


def test_fire_dispatches_the_occurrence_with_its_deterministic_run_id() -> None:
    """A FIRE timer yields RunDue(run_id_for(job, t), attempt 1, SCHEDULED) carrying the spec."""
    h = Harness(now=T0 + SECOND, cfg=CoreConfig(tz_version="2026a"))
    job_spec = cron("* * * * *", pool="gpu", timeout_ms=9 * MINUTE, lease_ms=20 * SECOND)
    h.create(job_spec)
    (due,) = h.dues(h.advance(T0 + MINUTE))
    assert due.run_id == run_id_for("job-1", T0 + MINUTE)
    assert (due.job_id, due.team, due.pool, due.attempt) == ("job-1", "team-a", "gpu", 1)
    assert due.trigger is RunTrigger.SCHEDULED
    assert due.scheduled_for_ms == due.not_before_ms == due.emitted_at_ms == T0 + MINUTE
    assert (due.executor, due.timeout_ms, due.lease_ms) == (job_spec.executor, 9 * MINUTE,
                                                            20 * SECOND)
    assert due.tz_version == "2026a"
    assert h.job.tz_version == "2026a"
    assert h.job.last_scheduled_ms == T0 + MINUTE
    assert h.job.next_fire_ms == T0 + 2 * MINUTE


def test_a_due_run_gets_a_start_deadline_lease_timer() -> None:
    """A DUE run's LEASE timer is at not_before + start_timeout_ms (the start_by flag)."""
    h = Harness(now=T0, cfg=CoreConfig(start_timeout_ms=90 * SECOND))
    h.create()
    (due,) = h.dues(h.advance(T0))
    assert start_deadline_ms(due) == T0 + 90 * SECOND
    assert f"start_by={T0 + 90 * SECOND}" in due.flags
    assert Timer(T0 + 90 * SECOND, "job-1", TimerKind.LEASE, due.run_id) in h.timers()


def test_look_ahead_dispatch_emits_run_due_early_with_a_future_not_before() -> None:
    """A FIRE timer handed before its time dispatches now, held until not_before."""
    h = Harness(now=T0 + 10 * SECOND)
    h.create()
    (due,) = h.dues(h.advance(T0 + 58 * SECOND, lookahead_ms=5 * SECOND))
    assert due.emitted_at_ms == T0 + 58 * SECOND
    assert due.not_before_ms == due.scheduled_for_ms == T0 + MINUTE
    # The start deadline counts from not_before, not from the early emission.
    assert start_deadline_ms(due) == T0 + MINUTE + CoreConfig().start_timeout_ms
    assert h.job.next_fire_ms == T0 + 2 * MINUTE


def test_spread_delays_the_timer_but_not_the_run_id() -> None:
    """With spread_ms the FIRE timer and not_before move by the offset; the run id does not."""
    h = Harness(now=T0 + SECOND)
    h.create(cron("0 * * * *", spread_ms=10 * MINUTE, jitter_ms=30 * SECOND))
    nominal = T0 + HOUR
    offset = offset_ms("job-1", nominal, 10 * MINUTE, 30 * SECOND)
    assert 0 < offset < 10 * MINUTE + 30 * SECOND
    assert h.timer(TimerKind.FIRE).due_ms == nominal + offset
    assert h.advance(nominal + offset - 1) == []
    (due,) = h.dues(h.advance(nominal + offset))
    assert due.scheduled_for_ms == nominal
    assert due.not_before_ms == nominal + offset
    assert due.run_id == run_id_for("job-1", nominal)


def test_a_stale_fire_timer_does_nothing() -> None:
    """A FIRE timer whose due time the state no longer implies produces no events."""
    h = Harness(now=T0 + SECOND)
    h.create()
    good = h.timer(TimerKind.FIRE)
    before = h.state
    for stale in (Timer(good.due_ms - 1, "job-1", TimerKind.FIRE),
                  Timer(good.due_ms, "job-2", TimerKind.FIRE)):
        h.now = good.due_ms
        assert h.apply(stale) == []
    assert h.state == before


def test_a_fire_timer_replayed_after_it_fired_does_nothing() -> None:
    """Re-delivering the FIRE timer that just fired is stale: no duplicate RunDue."""
    h = Harness(now=T0 + SECOND)
    h.create()
    timer = h.timer(TimerKind.FIRE)
    h.advance(timer.due_ms)
    assert h.apply(timer) == []


def test_an_update_that_changes_the_spread_makes_the_old_fire_timer_stale() -> None:
    """Changing spread moves the FIRE timer; the old entry is stale."""
    h = Harness(now=T0 + SECOND)
    h.create(cron("0 * * * *"))
    old = h.timer(TimerKind.FIRE)
    h.update(cron("0 * * * *", spread_ms=20 * MINUTE))
    assert old not in h.timers()
    h.now = old.due_ms
    assert h.apply(old) == []


def test_occurrence_flags_go_onto_run_due() -> None:
    """DST flags from the Occurrence are copied onto RunDue.flags."""
    h = Harness(now=utc(2026, 3, 7, 12, 0))
    h.create(cron("30 2 * * *", NY))
    (due,) = h.dues(h.advance(utc(2026, 3, 8, 12, 0), succeed_runs=True))
    assert "dst_gap_shifted" in due.flags


# ---------------------------------------------------------------------------
# Catch-up after downtime


def _down(h: Harness, until: int) -> list[Event]:
    """The processor was down until ``until``: the clock jumps, then the wheel catches up."""
    h.now = until
    return h.advance(until)


def _catchup_job(policy: CatchupPolicy, window_ms: int = HOUR) -> Harness:
    h = Harness(now=T0 - SECOND)
    h.create(cron("* * * * *", catchup=policy, catchup_window_ms=window_ms,
                  overlap=OverlapPolicy.ALLOW))
    return h


def test_catchup_skip_skips_every_missed_occurrence() -> None:
    """catchup=skip: each occurrence later than the tolerance is RunSkipped; on-time ones fire."""
    h = _catchup_job(CatchupPolicy.SKIP)
    events = _down(h, T0 + 10 * MINUTE + 30 * SECOND)
    skipped = h.of(RunSkipped, events)
    assert [s.scheduled_for_ms for s in skipped] == [T0 + i * MINUTE for i in range(10)]
    assert {s.reason for s in skipped} == {SkipReason.OUTSIDE_CATCHUP_WINDOW}
    assert [d.scheduled_for_ms for d in h.dues(events)] == [T0 + 10 * MINUTE]


def test_catchup_latest_fires_only_the_most_recent_missed_occurrence() -> None:
    """catchup=latest: the latest missed occurrence fires, the older missed ones are skipped."""
    h = _catchup_job(CatchupPolicy.LATEST)
    events = _down(h, T0 + 10 * MINUTE + 30 * SECOND)
    assert [s.scheduled_for_ms for s in h.of(RunSkipped, events)] == [
        T0 + i * MINUTE for i in range(9)
    ]
    assert [d.scheduled_for_ms for d in h.dues(events)] == [T0 + 9 * MINUTE, T0 + 10 * MINUTE]


def test_catchup_latest_skips_everything_older_than_the_window() -> None:
    """catchup=latest with the latest missed occurrence beyond the window fires none of them."""
    h = _catchup_job(CatchupPolicy.LATEST, window_ms=MINUTE)
    events = _down(h, T0 + 10 * MINUTE + 30 * SECOND)
    assert len(h.of(RunSkipped, events)) == 10
    assert [d.scheduled_for_ms for d in h.dues(events)] == [T0 + 10 * MINUTE]


def test_catchup_all_fires_the_missed_occurrences_within_the_window() -> None:
    """catchup=all: every missed occurrence within the window fires, older ones are skipped."""
    h = _catchup_job(CatchupPolicy.ALL, window_ms=5 * MINUTE)
    events = _down(h, T0 + 10 * MINUTE + 30 * SECOND)
    assert [s.scheduled_for_ms for s in h.of(RunSkipped, events)] == [
        T0 + i * MINUTE for i in range(6)
    ]
    assert [d.scheduled_for_ms for d in h.dues(events)] == [
        T0 + i * MINUTE for i in range(6, 11)
    ]
    assert all(d.emitted_at_ms == h.now for d in h.dues(events))


def test_a_late_occurrence_within_tolerance_is_not_missed() -> None:
    """An occurrence decided within misfire_tolerance_ms of its time fires under catchup=skip."""
    h = _catchup_job(CatchupPolicy.SKIP)
    (due,) = h.dues(_down(h, T0 + 59 * SECOND))
    assert due.scheduled_for_ms == T0


def test_catch_up_work_is_bounded_per_fire_timer() -> None:
    """At most max_fires_per_timer occurrences per call; the rest stays due for later steps."""
    h = Harness(now=T0 - SECOND, cfg=CoreConfig(max_fires_per_timer=3))
    h.create(cron("* * * * *", catchup=CatchupPolicy.SKIP))
    h.now = T0 + 10 * MINUTE + 30 * SECOND
    events = h.apply(h.timer(TimerKind.FIRE))
    assert len(events) == 3
    assert h.job.next_fire_ms == T0 + 3 * MINUTE
    assert h.timer(TimerKind.FIRE).due_ms <= h.now  # still due: the shell offers it again
    rest = h.advance(h.now)
    assert len(h.of(RunSkipped, rest)) == 7
    assert len(h.dues(rest)) == 1


def test_paused_wins_over_catch_up_as_the_skip_reason() -> None:
    """A paused job's missed occurrences are explained as paused."""
    h = _catchup_job(CatchupPolicy.SKIP)
    h.pause()
    events = _down(h, T0 + 5 * MINUTE)
    assert {s.reason for s in h.of(RunSkipped, events)} == {SkipReason.PAUSED}


# ---------------------------------------------------------------------------
# DST in America/New_York (2026: spring forward Mar 8, fall back Nov 1)


def _nominal_fires(h: Harness, until: int) -> list[int]:
    events = h.advance(until, succeed_runs=True)
    return [d.scheduled_for_ms for d in h.dues(events) if d.trigger is RunTrigger.SCHEDULED]


def test_fixed_time_in_the_spring_forward_gap_shifts_to_the_end_of_the_gap() -> None:
    """02:30 New York fires 02:30 EST, then 03:00 EDT on Mar 8, then 02:30 EDT."""
    h = Harness(now=utc(2026, 3, 7, 0, 0))
    h.create(cron("30 2 * * *", NY))
    assert _nominal_fires(h, utc(2026, 3, 10, 0, 0)) == [
        utc(2026, 3, 7, 7, 30),
        utc(2026, 3, 8, 7, 0),
        utc(2026, 3, 9, 6, 30),
    ]


def test_fixed_time_in_the_gap_with_gap_skip_is_skipped_as_dst_gap() -> None:
    """gap=skip: the nonexistent 02:30 is RunSkipped(dst_gap), and the schedule goes on."""
    h = Harness(now=utc(2026, 3, 7, 0, 0))
    h.create(spec(CronSchedule("30 2 * * *", NY, gap=GapPolicy.SKIP)))
    fires = _nominal_fires(h, utc(2026, 3, 10, 0, 0))
    assert fires == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 9, 6, 30)]
    (skipped,) = h.of(RunSkipped)
    assert skipped.reason is SkipReason.DST_GAP
    assert skipped.scheduled_for_ms == utc(2026, 3, 8, 7, 0)


def test_fixed_time_in_the_fall_back_fold_fires_once_at_the_first_pass() -> None:
    """01:30 New York on Nov 1 fires once, at 01:30 EDT (05:30Z)."""
    h = Harness(now=utc(2026, 10, 31, 0, 0))
    h.create(cron("30 1 * * *", NY))
    assert _nominal_fires(h, utc(2026, 11, 3, 0, 0)) == [
        utc(2026, 10, 31, 5, 30),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    ]
    assert "dst_fold_first" in h.dues()[1].flags


def test_fold_policy_both_fires_in_each_pass() -> None:
    """fold=both: the repeated 01:30 fires twice, with two distinct run ids."""
    h = Harness(now=utc(2026, 11, 1, 0, 0))
    h.create(spec(CronSchedule("30 1 * * *", NY, fold=FoldPolicy.BOTH)))
    fires = _nominal_fires(h, utc(2026, 11, 1, 12, 0))
    assert fires == [utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 6, 30)]
    assert len({d.run_id for d in h.dues()}) == 2


def test_wildcard_hour_fires_at_every_real_instant_across_both_transitions() -> None:
    """*/30 * * * * fires every 30 real minutes: no gap hole in March, both folds in November."""
    h = Harness(now=utc(2026, 3, 8, 6, 0) - 1)
    h.create(cron("*/30 * * * *", NY))
    march = _nominal_fires(h, utc(2026, 3, 8, 8, 0))
    assert march == [utc(2026, 3, 8, 6, 0) + i * 30 * MINUTE for i in range(5)]
    h2 = Harness(now=utc(2026, 11, 1, 4, 30) - 1)
    h2.create(cron("*/30 * * * *", NY))
    november = _nominal_fires(h2, utc(2026, 11, 1, 7, 0))
    # 00:30 EDT, 01:00 EDT, 01:30 EDT, 01:00 EST, 01:30 EST, 02:00 EST
    assert november == [utc(2026, 11, 1, 4, 30) + i * 30 * MINUTE for i in range(6)]


@pytest.mark.parametrize("tz", ["UTC", NY])
def test_a_daily_job_never_repeats_a_run_id_over_a_year(tz: str) -> None:
    """A daily job run through a whole year (both transitions) fires 365 distinct run ids."""
    h = Harness(now=utc(2026, 1, 1, 0, 0) - 1)
    h.create(cron("0 12 * * *", tz))
    fires = _nominal_fires(h, utc(2026, 12, 31, 23, 0))
    assert len(fires) == 365
    assert len({d.run_id for d in h.dues()}) == 365
    assert h.job.status is JobStatus.ACTIVE
    assert fires == sorted(fires)
    assert all(b - a in (DAY - HOUR, DAY, DAY + HOUR) for a, b in pairwise(fires))
