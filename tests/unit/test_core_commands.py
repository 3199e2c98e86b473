"""decide/evolve for commands: create, update, pause, resume, cancel, delete, trigger."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.core_harness import DAY, HOUR, MINUTE, SECOND, T0, Harness, cron, once, spec
from tickwheel.schemas.model import (
    CancelJob,
    CatchupPolicy,
    CommandMeta,
    CronSchedule,
    DeleteJob,
    ExecutorSpec,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobStatus,
    OneTime,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RetryPolicy,
    RunCancelled,
    RunDue,
    RunSettled,
    RunSkipped,
    RunStatus,
    RunSucceeded,
    RunTrigger,
    SkipReason,
    TriggerJob,
    UpdateJob,
    manual_run_id_for,
    run_id_for,
)
from tickwheel.streams.core import RECENT_COMMANDS_KEPT, CoreConfig, decide, timers_of
from tickwheel.streams.timers import Timer, TimerKind

# ---------------------------------------------------------------------------
# Create


def test_create_accepts_at_version_one_and_arms_the_next_minute() -> None:
    """A valid create yields JobAccepted(version=1) and a FIRE timer at the next occurrence."""
    h = Harness(now=T0 + 10 * SECOND)
    (event,) = h.create(command_id="c1")
    assert event == JobAccepted("job-1", "c1", 1, spec(), T0 + 10 * SECOND)
    assert h.job.status is JobStatus.ACTIVE
    assert h.job.next_fire_ms == T0 + MINUTE
    assert h.timers() == {Timer(T0 + MINUTE, "job-1", TimerKind.FIRE)}


def test_create_on_an_occurrence_boundary_includes_that_occurrence() -> None:
    """A cron job's first occurrence is the first at or after the accept time."""
    h = Harness(now=T0)
    h.create()
    assert h.job.next_fire_ms == T0


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"team": " "}, "spec.team"),
        ({"name": ""}, "spec.name"),
        ({"pool": ""}, "spec.pool"),
        ({"timeout_ms": 0}, "spec.timeout_ms"),
        ({"lease_ms": -1}, "spec.lease_ms"),
        ({"spread_ms": -5}, "spec.spread_ms"),
        ({"jitter_ms": -5}, "spec.jitter_ms"),
        ({"catchup_window_ms": -1}, "spec.catchup_window_ms"),
        ({"auto_pause_after": -1}, "spec.auto_pause_after"),
        ({"retry": RetryPolicy(max_attempts=0)}, "spec.retry.max_attempts"),
        ({"retry": RetryPolicy(max_attempts=1000)}, "spec.retry.max_attempts"),
        ({"retry": RetryPolicy(backoff_initial_ms=-1)}, "spec.retry.backoff_initial_ms"),
        ({"retry": RetryPolicy(backoff_initial_ms=10, backoff_max_ms=5)},
         "spec.retry.backoff_max_ms"),
        ({"retry": RetryPolicy(backoff_multiplier=0.5)}, "spec.retry.backoff_multiplier"),
        ({"retry": RetryPolicy(backoff_multiplier=float("nan"))},
         "spec.retry.backoff_multiplier"),
        ({"retry": RetryPolicy(jitter=1.5)}, "spec.retry.jitter"),
        ({"executor": ExecutorSpec("")}, "spec.executor.kind"),
        ({"executor": ExecutorSpec("http", "[1]")}, "spec.executor.config_json"),
        ({"executor": ExecutorSpec("http", "{nope")}, "spec.executor.config_json"),
        ({"schedule": CronSchedule("61 * * * *")}, "spec.schedule.expr"),
        ({"schedule": CronSchedule("0 0 * * *", "Mars/Olympus")}, "spec.schedule.tz"),
        ({"schedule": OneTime(-1)}, "spec.schedule.at_ms"),
    ],
)
def test_create_rejects_an_invalid_spec_naming_the_field(
    overrides: dict[str, Any], field: str
) -> None:
    """Each invalid spec field gives JobRejected naming it, and no job comes into being."""
    h = Harness()
    (event,) = h.create(spec(**overrides))
    assert isinstance(event, JobRejected)
    assert event.field == field
    assert event.reason.startswith("invalid: ")
    assert h.state is None


@pytest.mark.parametrize("job_id", ["", "a\x00b"])
def test_create_rejects_an_empty_or_nul_job_id(job_id: str) -> None:
    """A job id must be non-empty and NUL-free (NUL separates timer key fields)."""
    h = Harness(job_id=job_id)
    (event,) = h.create()
    assert isinstance(event, JobRejected)
    assert event.field == "job_id"


def test_create_rejects_a_schedule_below_the_minimum_interval() -> None:
    """schedule.validate runs with cfg.min_interval_ms."""
    h = Harness(cfg=CoreConfig(min_interval_ms=5 * MINUTE))
    (event,) = h.create(cron("* * * * *"))
    assert isinstance(event, JobRejected)
    assert event.field == "spec.schedule.expr"


def test_create_retried_with_the_same_command_id_produces_nothing() -> None:
    """A client retry of a create that succeeded is deduplicated by command id."""
    h = Harness()
    h.create(command_id="c1")
    before = h.state
    assert h.create(command_id="c1") == []
    assert h.state == before


def test_create_on_an_existing_job_is_rejected() -> None:
    """A second create with a new command id is JobRejected(already_exists) and changes nothing."""
    h = Harness()
    h.create(command_id="c1")
    before = h.state
    (event,) = h.create(command_id="c2")
    assert isinstance(event, JobRejected)
    assert (event.reason, event.field) == ("already_exists", "job_id")
    assert h.state == before


def test_rejected_commands_are_not_remembered() -> None:
    """A rejected command id is judged again when retried (rejections change nothing)."""
    h = Harness()
    h.create(command_id="c1")
    h.pause(command_id="bad")  # accepted
    bad = UpdateJob(CommandMeta("upd", "job-1", h.now), spec(), expected_version=9)
    assert isinstance(h.apply(bad)[0], JobRejected)
    assert isinstance(h.apply(bad)[0], JobRejected)
    assert "upd" not in h.job.recent_command_ids


def test_one_time_job_in_the_future_fires_at_its_instant() -> None:
    """A one-time job's FIRE timer is at at_ms; the job completes when its run settles."""
    h = Harness()
    h.create(once(T0 + DAY))
    assert h.timer(TimerKind.FIRE).due_ms == T0 + DAY
    (due,) = h.dues(h.advance(T0 + DAY))
    assert (due.scheduled_for_ms, due.not_before_ms, due.attempt) == (T0 + DAY, T0 + DAY, 1)
    assert h.job.next_fire_ms is None
    h.start()
    events = h.succeed()
    assert [type(e).__name__ for e in events] == ["RunSucceeded", "RunSettled", "JobChanged"]
    assert h.of(JobChanged, events)[0].change == "completed"
    assert h.job.status is JobStatus.COMPLETED
    assert h.timers() == frozenset()


def test_one_time_job_in_the_past_within_the_window_fires_at_once() -> None:
    """A one-time job created 10 min late (window 1 h, catchup=latest) fires immediately."""
    h = Harness(now=T0 + 10 * MINUTE)
    h.create(once(T0))
    (due,) = h.dues(h.advance(h.now))
    assert due.scheduled_for_ms == T0
    assert due.not_before_ms == T0
    assert due.emitted_at_ms == T0 + 10 * MINUTE


def test_one_time_job_older_than_the_window_is_skipped_and_completes() -> None:
    """A one-time job older than its catch-up window is RunSkipped(outside_catchup_window)."""
    h = Harness(now=T0 + 2 * DAY)
    h.create(once(T0))
    events = h.advance(h.now)
    (skipped,) = h.of(RunSkipped, events)
    assert skipped.reason is SkipReason.OUTSIDE_CATCHUP_WINDOW
    assert skipped.run_id == run_id_for("job-1", T0)
    assert h.job.status is JobStatus.COMPLETED
    assert h.dues() == []


def test_one_time_job_in_the_past_with_catchup_skip_is_skipped() -> None:
    """With catchup=skip even a recent past one-time occurrence beyond tolerance is skipped."""
    h = Harness(now=T0 + 10 * MINUTE)
    h.create(once(T0, catchup=CatchupPolicy.SKIP))
    (skipped,) = h.of(RunSkipped, h.advance(h.now))
    assert skipped.reason is SkipReason.OUTSIDE_CATCHUP_WINDOW


# ---------------------------------------------------------------------------
# Update


def test_update_bumps_the_version_and_recomputes_the_next_fire_from_now() -> None:
    """Update replaces the spec in place, version + 1, next fire from the update time."""
    h = Harness(now=T0 + 10 * SECOND)
    h.create()
    new = cron("0 * * * *")
    (event,) = h.update(new, command_id="u1")
    assert event == JobAccepted("job-1", "u1", 2, new, T0 + 10 * SECOND)
    assert h.job.version == 2
    assert h.job.spec == new
    assert h.job.next_fire_ms == T0 + 60 * MINUTE


def test_update_with_a_stale_version_is_rejected() -> None:
    """expected_version must equal the current version, else version_conflict."""
    h = Harness()
    h.create()
    before = h.state
    (event,) = h.update(cron("0 * * * *"), expected_version=7)
    assert isinstance(event, JobRejected)
    assert (event.reason, event.field) == ("version_conflict", "expected_version")
    assert h.state == before


def test_update_cannot_change_the_team() -> None:
    """The owning team is immutable."""
    h = Harness()
    h.create()
    (event,) = h.update(spec(team="team-b"))
    assert isinstance(event, JobRejected)
    assert (event.reason, event.field) == ("team_immutable", "spec.team")


def test_update_validates_the_new_spec() -> None:
    """An update with an invalid spec is rejected like a create."""
    h = Harness()
    h.create()
    (event,) = h.update(spec(timeout_ms=0))
    assert isinstance(event, JobRejected)
    assert event.field == "spec.timeout_ms"


def test_update_leaves_in_flight_runs_alone() -> None:
    """Runs dispatched under the old spec keep running; they are not cancelled."""
    h = Harness(now=T0)
    h.create()
    h.advance(T0)
    h.start()
    run = h.only_run()
    h.advance(T0 + 10 * SECOND)
    events = h.update(cron("0 * * * *", timeout_ms=5 * MINUTE))
    assert h.of(RunCancelled, events) == []
    assert h.only_run() == run


def test_update_at_an_already_fired_occurrence_does_not_fire_it_again() -> None:
    """The next fire after an update is strictly after the last decided occurrence."""
    h = Harness(now=T0)
    h.create()
    h.advance(T0)
    h.succeed()
    h.update(cron("*/2 * * * *"))
    assert h.job.next_fire_ms == T0 + 2 * MINUTE
    h.advance(T0 + 2 * MINUTE)
    assert [d.scheduled_for_ms for d in h.dues()] == [T0, T0 + 2 * MINUTE]


def test_update_reactivates_a_completed_one_time_job() -> None:
    """A COMPLETED job given a new future occurrence becomes ACTIVE and fires it."""
    h = Harness()
    h.create(once(T0 + MINUTE))
    h.advance(T0 + MINUTE)
    h.succeed()
    assert h.status() is JobStatus.COMPLETED
    h.update(once(T0 + HOUR))
    assert h.status() is JobStatus.ACTIVE
    h.advance(T0 + HOUR)
    assert h.dues()[-1].scheduled_for_ms == T0 + HOUR


def test_update_decides_an_occurrence_whose_spread_offset_is_pending() -> None:
    """An occurrence nominally passed but still inside its spread is dispatched, not dropped."""
    h = Harness(now=T0 - 1)
    h.create(cron("0 * * * *", spread_ms=30 * MINUTE))
    fire = h.timer(TimerKind.FIRE)
    assert fire.due_ms > T0 + SECOND  # the spread put it later than the nominal time
    h.now = T0 + 1
    events = h.update(cron("30 * * * *", spread_ms=30 * MINUTE))
    (due,) = h.dues(events)
    assert due.scheduled_for_ms == T0
    assert due.not_before_ms == fire.due_ms  # look-ahead dispatch: held until its slot
    assert isinstance(events[-1], JobAccepted)


# ---------------------------------------------------------------------------
# Pause / resume


def test_pause_skips_occurrences_but_keeps_the_fire_timer() -> None:
    """A paused job emits RunSkipped(paused) per occurrence, never RunDue."""
    h = Harness(now=T0 + SECOND)
    h.create()
    (event,) = h.pause(command_id="p1")
    assert event == JobChanged("job-1", "p1", 1, JobStatus.PAUSED, "paused", "", T0 + SECOND)
    assert any(t.kind is TimerKind.FIRE for t in h.timers())
    events = h.advance(T0 + 3 * MINUTE)
    assert h.dues(events) == []
    assert [s.reason for s in h.of(RunSkipped, events)] == [SkipReason.PAUSED] * 3


def test_pause_lets_in_flight_runs_continue() -> None:
    """Pausing neither cancels nor fences a running run; it settles normally."""
    h = Harness(now=T0)
    h.create()
    h.advance(T0)
    h.start()
    events = h.pause()
    assert h.of(RunCancelled, events) == []
    h.advance(T0 + 10 * SECOND)
    assert isinstance(h.succeed()[1], RunSettled)


def test_resume_fires_the_following_occurrences_again() -> None:
    """After resume, the next occurrence fires; the paused ones stay skipped."""
    h = Harness(now=T0 + SECOND)
    h.create()
    h.pause()
    h.advance(T0 + 2 * MINUTE)
    (event,) = h.of(JobChanged, h.resume(command_id="r1"))
    assert (event.status, event.change, event.reason) == (JobStatus.ACTIVE, "resumed", "")
    h.advance(T0 + 3 * MINUTE)
    assert [d.scheduled_for_ms for d in h.dues()] == [T0 + 3 * MINUTE]


def test_pausing_a_paused_job_is_an_accepted_no_op() -> None:
    """Pause on PAUSED answers JobChanged(reason=already_paused) and changes only recent ids."""
    h = Harness()
    h.create()
    h.pause()
    (event,) = h.pause()
    assert isinstance(event, JobChanged)
    assert (event.status, event.reason) == (JobStatus.PAUSED, "already_paused")


def test_resuming_an_active_job_is_an_accepted_no_op() -> None:
    """Resume on ACTIVE answers JobChanged(reason=already_active)."""
    h = Harness()
    h.create()
    (event,) = h.resume()
    assert isinstance(event, JobChanged)
    assert (event.status, event.reason) == (JobStatus.ACTIVE, "already_active")


def test_pause_or_resume_of_a_completed_job_is_rejected() -> None:
    """A COMPLETED job has nothing to pause: JobRejected(completed)."""
    h = Harness(now=T0 + 2 * DAY)
    h.create(once(T0))
    h.advance(h.now)
    for events in (h.pause(), h.resume()):
        (event,) = events
        assert isinstance(event, JobRejected)
        assert event.reason == "completed"


# ---------------------------------------------------------------------------
# Cancel / delete


def _running_job(h: Harness) -> None:
    h.create()
    h.advance(T0)
    h.start()


def test_cancel_cancels_in_flight_runs_and_clears_timers() -> None:
    """Cancel: RunCancelled + RunSettled(CANCELLED) per run, then JobChanged; no timers left."""
    h = Harness(now=T0)
    _running_job(h)
    run = h.only_run()
    h.advance(T0 + 5 * SECOND)
    events = h.cancel(command_id="x1")
    assert events == [
        RunCancelled(run.run_id, "job-1", 1, "cancelled", T0 + 5 * SECOND),
        RunSettled(run.run_id, "job-1", "team-a", RunStatus.CANCELLED, 1, T0, T0 + 5 * SECOND,
                   "job cancelled"),
        JobChanged("job-1", "x1", 1, JobStatus.CANCELLED, "cancelled", "", T0 + 5 * SECOND),
    ]
    assert h.job.status is JobStatus.CANCELLED
    assert h.job.runs == ()
    assert h.timers() == frozenset()
    assert h.advance(T0 + DAY) == []


def test_outcomes_after_cancel_are_ignored() -> None:
    """A worker's report for a run of a cancelled job produces no events."""
    h = Harness(now=T0)
    _running_job(h)
    run = h.only_run()
    h.cancel()
    before = h.state
    assert h.apply(RunSucceeded(run.run_id, "job-1", 1, "w1", h.now)) == []
    assert h.state == before


@pytest.mark.parametrize(
    "make",
    [
        PauseJob,
        ResumeJob,
        CancelJob,
        TriggerJob,
        lambda m: UpdateJob(m, spec(), 1),
    ],
)
def test_commands_on_a_cancelled_job_are_rejected(make: Any) -> None:
    """Everything but delete on a CANCELLED job is JobRejected(cancelled)."""
    h = Harness()
    h.create()
    h.cancel()
    before = h.state
    (event,) = h.apply(make(h.meta()))
    assert isinstance(event, JobRejected)
    assert event.reason == "cancelled"
    assert h.state == before


def test_cancel_skips_buffered_and_passed_undecided_occurrences() -> None:
    """Occurrences held in the buffer or nominally passed are explained, not lost."""
    h = Harness(now=T0)
    h.create(cron("* * * * *", overlap=OverlapPolicy.BUFFER_ALL))
    h.advance(T0 + 2 * MINUTE)
    assert len(h.job.buffered) == 2
    events = h.cancel()
    skipped = h.of(RunSkipped, events)
    assert [s.scheduled_for_ms for s in skipped] == [T0 + MINUTE, T0 + 2 * MINUTE]
    assert {s.reason for s in skipped} == {SkipReason.CANCELLED}


def test_cancel_explains_an_occurrence_inside_its_spread_window() -> None:
    """A nominally-passed occurrence whose spread slot is still ahead is RunSkipped(cancelled)."""
    h = Harness(now=T0 - 1)
    h.create(cron("0 * * * *", spread_ms=30 * MINUTE))
    h.now = T0 + 1
    skipped = h.of(RunSkipped, h.cancel())
    assert [(s.scheduled_for_ms, s.reason) for s in skipped] == [(T0, SkipReason.CANCELLED)]


def test_delete_cancels_runs_and_leaves_a_tombstone() -> None:
    """Delete: like cancel, then the state is None and JobChanged(deleted) is the answer."""
    h = Harness(now=T0)
    _running_job(h)
    events = h.delete(command_id="d1")
    assert [type(e).__name__ for e in events] == ["RunCancelled", "RunSettled", "JobChanged"]
    assert h.of(RunCancelled, events)[0].reason == "deleted"
    assert events[-1] == JobChanged("job-1", "d1", 1, JobStatus.DELETED, "deleted", "", T0)
    assert h.state is None
    assert timers_of(h.state) == frozenset()


def test_delete_of_a_cancelled_job_is_allowed_and_create_works_after() -> None:
    """A cancelled job can be deleted; the id is then free for a new job."""
    h = Harness()
    h.create()
    h.cancel()
    (event,) = h.delete()
    assert isinstance(event, JobChanged)
    assert h.state is None
    (created,) = h.create(command_id="again")
    assert isinstance(created, JobAccepted)
    assert created.version == 1


# ---------------------------------------------------------------------------
# Trigger


def test_trigger_dispatches_a_manual_run_now() -> None:
    """Trigger: RunDue(MANUAL) with the manual run id, scheduled_for = not_before = now."""
    h = Harness(now=T0 + 7 * SECOND)
    h.create()
    events = h.trigger(command_id="t1")
    due, ack = events
    assert isinstance(due, RunDue)
    assert due.run_id == manual_run_id_for("t1")
    assert (due.trigger, due.attempt) == (RunTrigger.MANUAL, 1)
    assert due.scheduled_for_ms == due.not_before_ms == T0 + 7 * SECOND
    assert ack == JobChanged("job-1", "t1", 1, JobStatus.ACTIVE, "triggered", due.run_id,
                             T0 + 7 * SECOND)
    assert h.job.next_fire_ms == T0 + MINUTE  # the schedule is untouched


def test_trigger_ignores_the_overlap_policy() -> None:
    """A manual trigger fires even while a run is in flight under overlap=skip."""
    h = Harness(now=T0)
    _running_job(h)
    assert h.dues(h.trigger())[0].trigger is RunTrigger.MANUAL
    assert len(h.job.runs) == 2


def test_trigger_works_on_a_paused_job() -> None:
    """A human can run a paused job by hand."""
    h = Harness()
    h.create()
    h.pause()
    assert len(h.dues(h.trigger())) == 1


def test_trigger_works_on_a_completed_job_and_it_stays_completed() -> None:
    """A COMPLETED job can still be run by hand; settling that run does not re-complete it."""
    h = Harness(now=T0 + 2 * DAY)
    h.create(once(T0))
    h.advance(h.now)
    assert h.status() is JobStatus.COMPLETED
    (due,) = h.dues(h.trigger())
    events = h.succeed(due.run_id)
    assert h.of(JobChanged, events) == []
    assert h.status() is JobStatus.COMPLETED


def test_duplicate_trigger_dispatches_once() -> None:
    """A retried trigger command (same id) does not dispatch a second run."""
    h = Harness()
    h.create()
    h.trigger(command_id="t1")
    assert h.trigger(command_id="t1") == []
    assert len(h.dues()) == 1


def test_manual_runs_count_as_in_flight_for_overlap() -> None:
    """A scheduled occurrence is overlap-skipped while a manual run is in flight."""
    h = Harness(now=T0 + SECOND)
    h.create()
    h.trigger()
    (skipped,) = h.of(RunSkipped, h.advance(T0 + MINUTE))
    assert skipped.reason is SkipReason.OVERLAP


# ---------------------------------------------------------------------------
# Shared rules


@pytest.mark.parametrize(
    "make",
    [
        PauseJob,
        ResumeJob,
        CancelJob,
        DeleteJob,
        TriggerJob,
        lambda m: UpdateJob(m, spec(), 1),
    ],
)
def test_commands_on_a_missing_job_are_rejected_not_found(make: Any) -> None:
    """Any command but create on a job that does not exist: JobRejected(not_found)."""
    h = Harness()
    (event,) = h.apply(make(h.meta()))
    assert isinstance(event, JobRejected)
    assert (event.reason, event.field) == ("not_found", "job_id")
    assert h.state is None


def test_recent_command_ids_are_bounded() -> None:
    """The state remembers only the newest RECENT_COMMANDS_KEPT command ids."""
    h = Harness()
    h.create(command_id="c0")
    for i in range(1, 50):
        h.pause(command_id=f"c{i}")
    assert len(h.job.recent_command_ids) == RECENT_COMMANDS_KEPT
    assert h.job.recent_command_ids[-1] == "c49"
    assert "c0" not in h.job.recent_command_ids


def test_dedupe_window_follows_cfg_recent_commands() -> None:
    """cfg.recent_commands narrows how far back a duplicate is recognised."""
    h = Harness(cfg=CoreConfig(recent_commands=2))
    h.create(command_id="c0")
    h.pause(command_id="c1")
    h.pause(command_id="c2")
    assert h.pause(command_id="c2") == []
    (event,) = h.pause(command_id="c0")  # outside the window of 2: judged again
    assert isinstance(event, JobChanged)


def test_decide_does_not_touch_the_state_it_is_given() -> None:
    """decide is pure: it returns events and leaves its input state as it was."""
    h = Harness(now=T0)
    _running_job(h)
    before = h.state
    events = decide(h.state, CancelJob(h.meta()), h.now, h.cfg)
    assert events
    assert h.state is before
