"""The scheduler's pure core: ``decide`` turns one input into events, ``evolve`` folds one event
into a job's state. No I/O and no clock: the shell passes ``now_ms``.

Event-sourcing discipline
    ``decide`` never constructs a :class:`JobState`; only ``evolve`` does. When a later choice
    in one call depends on an earlier one (the next catch-up occurrence after a fire, an
    auto-pause after a failed settle), ``decide`` reads it from evolve's fold of the events it
    has emitted so far, so the two cannot disagree. ``step`` returns that same fold. Every
    event carries what ``evolve`` needs, so folding the log from ``None`` rebuilds the state.

Each command gets exactly one answer on ``job-events`` (JobAccepted, a JobChanged carrying its
command id, or JobRejected), or none at all when its command id is one of the last
``cfg.recent_commands`` seen (a client retry). Rejections change nothing and are not
remembered, so a retried rejected command is judged again.

Choices the brief left open (each pinned by a test):

* Create: a one-time job's occurrence is its ``at_ms`` even when it is in the past; the
  catch-up policy then decides it like an occurrence missed during downtime (with the
  default ``latest`` or with ``all`` it fires at once if within ``catchup_window_ms``, else
  RunSkipped(outside_catchup_window); with ``skip`` only within ``misfire_tolerance_ms``).
  A cron job's first occurrence is the first at or after the accept time: JobAccepted has
  no field for another anchor, and evolve has no config.
* Update: recomputes the next occurrence at or after the update time but strictly after the
  last decided one (so no run id repeats). Occurrences of the old schedule whose nominal
  time has passed but whose spread offset has not are decided first (look-ahead dispatch),
  so an update never silently drops one. A COMPLETED job with a new future occurrence
  becomes ACTIVE again; PAUSED stays PAUSED. Update emits JobAccepted(version + 1) only.
* Pause on a paused job / resume on an active job: accepted no-ops, answered with
  JobChanged(reason="already_paused" / "already_active"). Pause/resume on a COMPLETED job:
  JobRejected("completed"). Leaving PAUSED resets ``consecutive_failures``.
* Trigger: RunDue(MANUAL) plus JobChanged(change="triggered", reason=run id). Ignores the
  overlap policy (a human asked for it), works on PAUSED and COMPLETED jobs, and manual runs
  count as in flight for the overlap policy of later scheduled occurrences.
* Cancel/Delete: undecided occurrences whose nominal time has passed (spread pending) get
  RunSkipped(cancelled), buffered ones too; every in-flight run gets RunCancelled then
  RunSettled(CANCELLED); the JobChanged acknowledgement comes last.
* Completion: a live (ACTIVE/PAUSED) job with no next occurrence, no run in flight and
  nothing buffered becomes COMPLETED (JobChanged "completed"): a one-time job after its run
  settles or its occurrence is skipped (also a cron job whose search horizon runs dry).
* Buffering: there is no RunBuffered event, so a buffered occurrence is recorded as
  JobChanged(change="buffered", reason=str(scheduled_for_ms)). A buffered occurrence is
  dispatched (RunDue, not_before = now) once no run of the job is in flight, paused or not:
  it was decided before any pause.
* Outcomes: RunSucceeded/RunFailed/RunTimedOut are accepted from the lease holder, or from
  any worker while the attempt is still DUE (a worker may report a result without having
  reported a start; the result is still a fact). A run's retry time is
  ``outcome.at_ms + backoff``: the outcome event is all evolve sees, so the worker's clock
  stands in for "now" (likewise ``deadline = RunStarted.at_ms + timeout_ms``).
* LEASE/TIMEOUT expiry first emits RunCancelled for the lapsed attempt (reason
  ``start_timeout``, ``lease_expired`` or ``timeout``) so a worker still holding it has an
  explicit fence on the queue; a final timeout settles TIMED_OUT, a final lease/start expiry
  FAILED, both dead-lettered.
* Start deadline: a DUE run's LEASE timer is at ``max(not_before, now) + start_timeout_ms``
  (a catch-up run's not_before is in the past). RunDue has no field for it and evolve has no
  config, so it travels as the flag ``start_by=<ms>`` (see :func:`start_deadline_ms`).
* Overlap is judged when the occurrence is decided, which with look-ahead dispatch can be up
  to the look-ahead before its time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tickwheel.schemas.model import (
    AttemptRecord,
    CancelJob,
    CatchupPolicy,
    Command,
    CommandMeta,
    CreateJob,
    DeadLetter,
    DeleteJob,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobSpec,
    JobState,
    JobStatus,
    OneTime,
    Outcome,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RunCancelled,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunState,
    RunStatus,
    RunSucceeded,
    RunTimedOut,
    RunTrigger,
    Schedule,
    SkipReason,
    TriggerJob,
    UpdateJob,
    manual_run_id_for,
    run_id_for,
)
from tickwheel.streams.retry import backoff_ms
from tickwheel.streams.schedule import (
    Occurrence,
    ScheduleError,
    next_occurrence,
    offset_ms,
    validate,
)
from tickwheel.streams.timers import Timer, TimerKind

DEFAULT_START_TIMEOUT_MS = 300_000
BUFFER_CAP = 100  # buffer_all holds at most this many occurrences; more are skipped
HISTORY_CAP = 20  # attempt records kept per run (the newest), and so in a dead letter
RECENT_COMMANDS_KEPT = 32  # command ids evolve remembers; cfg.recent_commands can only lower it
MAX_ATTEMPTS_LIMIT = 100
ERROR_TEXT_CAP = 500  # characters of a worker's error kept in the state
START_BY_FLAG = "start_by="

_LIVE = frozenset({JobStatus.ACTIVE, JobStatus.PAUSED})  # statuses that follow the schedule
_IN_FLIGHT = frozenset({RunStatus.DUE, RunStatus.RUNNING})  # an attempt is out with a worker
# RunCancelled reasons that end the current attempt: reason -> (history outcome, error text)
_ATTEMPT_ENDS = {
    "timeout": ("timed_out", "timeout"),
    "lease_expired": ("lease_expired", "lease expired"),
    "start_timeout": ("start_timeout", "not started before its start deadline"),
}


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Knobs of ``decide``. ``evolve`` takes none: the fold of the log must not depend on them."""

    misfire_tolerance_ms: int = 60_000  # an occurrence later than this is "missed"
    start_timeout_ms: int = DEFAULT_START_TIMEOUT_MS  # DUE with no RunStarted -> re-dispatch
    max_fires_per_timer: int = 100  # catch-up: occurrences decided per FIRE timer per call
    min_interval_ms: int = 1_000
    recent_commands: int = 32  # command ids consulted for dedupe (at most RECENT_COMMANDS_KEPT)
    tz_version: str = ""  # recorded on each RunDue and in JobState


Input = Command | Outcome | Timer
Published = (
    RunDue | RunCancelled | RunSkipped | JobAccepted | JobChanged | JobRejected | RunSettled
    | DeadLetter
)
Event = Published | Outcome
_PUBLISHED_TYPES = (
    RunDue, RunCancelled, RunSkipped, JobAccepted, JobChanged, JobRejected, RunSettled,
    DeadLetter,
)


# ---------------------------------------------------------------------------
# Public entry points


def decide(state: JobState | None, inp: Input, now_ms: int, cfg: CoreConfig) -> list[Event]:
    """The events ``inp`` causes at ``now_ms``; ``[]`` when it is stale, a duplicate or unknown."""
    return _run(state, inp, now_ms, cfg).events


def step(
    state: JobState | None, inp: Input, now_ms: int, cfg: CoreConfig
) -> tuple[JobState | None, list[Event]]:
    """``decide``, then the fold of ``evolve`` over its events: ``(new state, events)``."""
    decision = _run(state, inp, now_ms, cfg)
    return decision.state, decision.events


def published(events: Iterable[Event]) -> list[Published]:
    """The events the shell writes to Kafka: all but accepted outcomes (already on ``outcomes``)."""
    return [event for event in events if isinstance(event, _PUBLISHED_TYPES)]


def timers_of(state: JobState | None) -> frozenset[Timer]:
    """Exactly the wheel entries whose firing would do something for this state."""
    if state is None:
        return frozenset()
    timers: set[Timer] = set()
    if state.status in _LIVE and state.next_fire_ms is not None:
        due = _due(state, state.next_fire_ms)
        timers.add(Timer(due, state.job_id, TimerKind.FIRE, team=state.spec.team))
    for run in state.runs:
        timers.update(_run_timers(state.job_id, run, state.spec.team))
    return frozenset(timers)


def start_deadline_ms(due: RunDue) -> int:
    """When a DUE run is re-dispatched if no worker started it (the ``start_by=`` flag)."""
    for flag in due.flags:
        if flag.startswith(START_BY_FLAG) and flag[len(START_BY_FLAG) :].isdigit():
            return int(flag[len(START_BY_FLAG) :])
    # A RunDue from before the flag existed: assume the default start timeout.
    return max(due.not_before_ms, due.emitted_at_ms) + DEFAULT_START_TIMEOUT_MS


# ---------------------------------------------------------------------------
# decide: the accumulator


@dataclass(slots=True)
class _Decision:
    """The events of one decide call, and evolve's fold of them so far."""

    state: JobState | None
    now: int
    cfg: CoreConfig
    events: list[Event] = field(default_factory=list)

    def emit(self, event: Event) -> None:
        self.events.append(event)
        self.state = evolve(self.state, event)

    @property
    def job(self) -> JobState:
        # Callers reach here only after checking the job exists; a None is a bug in decide.
        assert self.state is not None
        return self.state


def _run(state: JobState | None, inp: Input, now_ms: int, cfg: CoreConfig) -> _Decision:
    decision = _Decision(state, now_ms, cfg)
    match inp:
        case Timer():
            _on_timer(decision, inp)
        case RunStarted() | RunHeartbeat() | RunSucceeded() | RunFailed() | RunTimedOut():
            _on_outcome(decision, inp)
        case _:
            _on_command(decision, inp)
    _maybe_complete(decision)
    return decision


# ---------------------------------------------------------------------------
# decide: commands


def _on_command(d: _Decision, cmd: Command) -> None:
    """Dedupe, existence and cancellation checks shared by every command, then its handler."""
    meta = cmd.meta
    if d.state is not None and _seen(d.state, meta.command_id, d.cfg):
        return
    if isinstance(cmd, CreateJob):
        _create(d, cmd)
    elif d.state is None:
        _reject(d, meta, "not_found", "job_id")
    elif d.state.status is JobStatus.CANCELLED and not isinstance(cmd, DeleteJob):
        _reject(d, meta, "cancelled", "job_id")
    else:
        _on_existing(d, cmd)


def _on_existing(
    d: _Decision, cmd: UpdateJob | PauseJob | ResumeJob | CancelJob | TriggerJob | DeleteJob
) -> None:
    match cmd:
        case UpdateJob():
            _update(d, cmd)
        case PauseJob():
            _set_paused(d, cmd.meta, paused=True)
        case ResumeJob():
            _set_paused(d, cmd.meta, paused=False)
        case CancelJob():
            _cancel(d, cmd.meta, JobStatus.CANCELLED)
        case DeleteJob():
            _cancel(d, cmd.meta, JobStatus.DELETED)
        case TriggerJob():
            _trigger(d, cmd.meta)


def _seen(state: JobState, command_id: str, cfg: CoreConfig) -> bool:
    window = max(0, min(cfg.recent_commands, RECENT_COMMANDS_KEPT))
    return window > 0 and command_id in state.recent_command_ids[-window:]


def _reject(d: _Decision, meta: CommandMeta, reason: str, field_name: str) -> None:
    d.emit(JobRejected(meta.job_id, meta.command_id, reason, field_name, d.now))


def _create(d: _Decision, cmd: CreateJob) -> None:
    """A new job at version 1, or a rejection naming the offending field."""
    meta = cmd.meta
    if d.state is not None:
        _reject(d, meta, "already_exists", "job_id")
        return
    problem = spec_problem(meta.job_id, cmd.spec, d.cfg)
    if problem is not None:
        _reject(d, meta, *problem)
        return
    d.emit(JobAccepted(meta.job_id, meta.command_id, 1, cmd.spec, d.now))


def _update(d: _Decision, cmd: UpdateJob) -> None:
    """Replace the spec in place at ``expected_version``; in-flight runs are untouched."""
    job, meta = d.job, cmd.meta
    problem: tuple[str, str] | None = None
    if cmd.expected_version != job.version:
        problem = ("version_conflict", "expected_version")
    elif cmd.spec.team != job.spec.team:
        problem = ("team_immutable", "spec.team")
    else:
        problem = spec_problem(meta.job_id, cmd.spec, d.cfg)
    if problem is not None:
        _reject(d, meta, *problem)
        return
    # Occurrences already nominally due belong to the old spec; decide them before it goes.
    _decide_passed(d, skip_reason=None)
    d.emit(JobAccepted(meta.job_id, meta.command_id, job.version + 1, cmd.spec, d.now))


def _set_paused(d: _Decision, meta: CommandMeta, *, paused: bool) -> None:
    """Pause or resume; repeating the current one is an accepted no-op."""
    job = d.job
    if job.status is JobStatus.COMPLETED:
        _reject(d, meta, "completed", "status")
        return
    target = JobStatus.PAUSED if paused else JobStatus.ACTIVE
    change = "paused" if paused else "resumed"
    reason = "" if job.status is not target else f"already_{target.value}"
    d.emit(JobChanged(job.job_id, meta.command_id, job.version, target, change, reason, d.now))


def _cancel(d: _Decision, meta: CommandMeta, status: JobStatus) -> None:
    """Stop for good: explain passed occurrences, cancel runs, drop the buffer, then ack."""
    change = "deleted" if status is JobStatus.DELETED else "cancelled"
    _decide_passed(d, skip_reason=SkipReason.CANCELLED)
    _cancel_runs(d, change, f"job {change}")
    for scheduled_for in d.job.buffered:
        _skip(d, scheduled_for, SkipReason.CANCELLED, f"job {change} while buffered")
    job = d.job
    d.emit(JobChanged(job.job_id, meta.command_id, job.version, status, change, "", d.now))


def _trigger(d: _Decision, meta: CommandMeta) -> None:
    """Run now, whatever the overlap policy; the run id derives from the command id."""
    run_id = manual_run_id_for(meta.command_id)
    job = d.job
    if _find_run(job, run_id) is not None:
        return  # the same command, evicted from recent ids but its run still in flight
    d.emit(_run_due(d, run_id, d.now, 1, RunTrigger.MANUAL, not_before=d.now))
    d.emit(JobChanged(job.job_id, meta.command_id, job.version, job.status, "triggered",
                      run_id, d.now))


def _cancel_runs(d: _Decision, reason: str, detail: str) -> None:
    for run in d.job.runs:
        d.emit(RunCancelled(run.run_id, d.job.job_id, run.attempt, reason, d.now))
        _settle(d, run.run_id, RunStatus.CANCELLED, detail, dead_letter=None, follow_up=False)


# ---------------------------------------------------------------------------
# Spec validation


def spec_problem(job_id: str, spec: JobSpec, cfg: CoreConfig) -> tuple[str, str] | None:
    """``(reason, field)`` for the first thing wrong with a job spec, or None if it is valid."""
    for bad, field_name, message in _spec_checks(job_id, spec):
        if bad:
            return f"invalid: {field_name} {message}", field_name
    try:
        validate(spec.schedule, min_interval_ms=cfg.min_interval_ms)
    except ScheduleError as err:
        field_name = f"spec.schedule.{err.field}" if err.field else "spec.schedule"
        return f"invalid: {err.message}", field_name
    return None


def _spec_checks(job_id: str, spec: JobSpec) -> list[tuple[bool, str, str]]:
    retry = spec.retry
    return [
        (not job_id, "job_id", "must not be empty"),
        ("\x00" in job_id, "job_id", "must not contain NUL"),
        (not spec.team.strip(), "spec.team", "must not be empty"),
        (not spec.name.strip(), "spec.name", "must not be empty"),
        (not spec.pool.strip(), "spec.pool", "must not be empty"),
        (not spec.executor.kind.strip(), "spec.executor.kind", "must not be empty"),
        (not _is_json_object(spec.executor.config_json), "spec.executor.config_json",
         "must be a JSON object"),
        (spec.timeout_ms <= 0, "spec.timeout_ms", "must be > 0"),
        (spec.lease_ms <= 0, "spec.lease_ms", "must be > 0"),
        (spec.catchup_window_ms < 0, "spec.catchup_window_ms", "must be >= 0"),
        (spec.spread_ms < 0, "spec.spread_ms", "must be >= 0"),
        (spec.jitter_ms < 0, "spec.jitter_ms", "must be >= 0"),
        (spec.auto_pause_after < 0, "spec.auto_pause_after", "must be >= 0"),
        (not 1 <= retry.max_attempts <= MAX_ATTEMPTS_LIMIT, "spec.retry.max_attempts",
         f"must be in 1..{MAX_ATTEMPTS_LIMIT}"),
        (retry.backoff_initial_ms < 0, "spec.retry.backoff_initial_ms", "must be >= 0"),
        (retry.backoff_max_ms < retry.backoff_initial_ms, "spec.retry.backoff_max_ms",
         "must be >= backoff_initial_ms"),
        (not (math.isfinite(retry.backoff_multiplier) and 1.0 <= retry.backoff_multiplier <= 100),
         "spec.retry.backoff_multiplier", "must be in [1, 100]"),
        (not (math.isfinite(retry.jitter) and 0.0 <= retry.jitter <= 1.0), "spec.retry.jitter",
         "must be in [0, 1]"),
    ]


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


# ---------------------------------------------------------------------------
# decide: timers and occurrences


def _on_timer(d: _Decision, timer: Timer) -> None:
    """A timer does something only if the state still implies exactly it."""
    if d.state is None or timer not in timers_of(d.state):
        return
    if timer.kind is TimerKind.FIRE:
        _on_fire(d)
        return
    run = _find_run(d.state, timer.run_id)
    assert run is not None  # timers_of only names runs of the state
    if timer.kind is TimerKind.RETRY:
        not_before = max(d.now, run.retry_at_ms)
        d.emit(_next_attempt(d, run, RunTrigger.RETRY, not_before=not_before))
    elif timer.kind is TimerKind.LEASE:
        _on_lease_lapsed(d, run)
    else:
        _on_timeout(d, run)


def _on_fire(d: _Decision) -> None:
    """Decide the timer's occurrence, then any further ones already due, up to the budget.

    Whatever the budget leaves undecided stays as ``next_fire_ms``: its timer is already due,
    so the shell offers it again and a long catch-up spreads over several steps.
    """
    for _ in range(max(1, d.cfg.max_fires_per_timer)):
        _decide_occurrence(d, _next_fire(d))
        job = d.job
        if job.status not in _LIVE or job.next_fire_ms is None:
            return
        if _due(job, job.next_fire_ms) > d.now:
            return


def _decide_passed(d: _Decision, skip_reason: SkipReason | None) -> None:
    """Decide (or skip with ``skip_reason``) occurrences whose nominal time has passed."""
    for _ in range(max(1, d.cfg.max_fires_per_timer)):
        job = d.job
        if job.status not in _LIVE or job.next_fire_ms is None or job.next_fire_ms > d.now:
            return
        if skip_reason is None:
            _decide_occurrence(d, job.next_fire_ms)
        else:
            _skip(d, job.next_fire_ms, skip_reason, "job stopped before this occurrence fired")


def _decide_occurrence(d: _Decision, scheduled_for: int) -> None:
    """Fire, buffer or skip one occurrence."""
    job = d.job
    occurrence = _occurrence_at(job.spec.schedule, scheduled_for)
    due = _due(job, scheduled_for)
    skip = _skip_reason(d, scheduled_for, due, occurrence)
    if skip is not None:
        _skip(d, scheduled_for, *skip)
    elif not (job.runs and _overlap_consumed(d, scheduled_for)):
        run_id = run_id_for(job.job_id, scheduled_for)
        d.emit(_run_due(d, run_id, scheduled_for, 1, RunTrigger.SCHEDULED, not_before=due,
                        flags=occurrence.flags))


def _skip_reason(
    d: _Decision, scheduled_for: int, due: int, occurrence: Occurrence
) -> tuple[SkipReason, str] | None:
    """Why an occurrence does not fire, before overlap: DST gap, then pause, then catch-up."""
    if occurrence.skipped:
        return SkipReason.DST_GAP, f"{occurrence.local_iso} does not exist (gap=skip)"
    if d.job.status is JobStatus.PAUSED:
        return SkipReason.PAUSED, "job paused"
    late = d.now - due
    if late <= d.cfg.misfire_tolerance_ms:
        return None
    refusal = _catchup_refusal(d, scheduled_for, late)
    return None if refusal is None else (SkipReason.OUTSIDE_CATCHUP_WINDOW, refusal)


def _catchup_refusal(d: _Decision, scheduled_for: int, late: int) -> str | None:
    """Why a missed occurrence must not fire under the job's catch-up policy, or None."""
    spec = d.job.spec
    if spec.catchup == CatchupPolicy.SKIP:
        return f"missed by {late} ms; catchup=skip"
    if late > spec.catchup_window_ms:
        return f"missed by {late} ms, beyond the catch-up window of {spec.catchup_window_ms} ms"
    if spec.catchup == CatchupPolicy.LATEST and _later_also_missed(d, scheduled_for):
        return "a later occurrence was missed too; catchup=latest fires only the latest"
    return None


def _later_also_missed(d: _Decision, scheduled_for: int) -> bool:
    """Whether the next real (not gap-skipped) occurrence is itself missed."""
    job, after = d.job, scheduled_for
    for _ in range(64):  # gap-skipped occurrences come a few at a time, never unbounded
        nxt = next_occurrence(job.spec.schedule, after)
        if nxt is None:
            return False
        if not nxt.skipped:
            return d.now - _due(job, nxt.at_ms) > d.cfg.misfire_tolerance_ms
        after = nxt.at_ms
    return False


def _overlap_consumed(d: _Decision, scheduled_for: int) -> bool:
    """Apply the overlap policy while runs are in flight; True if the occurrence is used up."""
    job = d.job
    policy = job.spec.overlap
    if policy == OverlapPolicy.ALLOW:
        return False
    if policy == OverlapPolicy.CANCEL_OTHER:
        _cancel_runs(d, "overlap", f"superseded by the occurrence at {scheduled_for}")
        return False
    if policy == OverlapPolicy.SKIP:
        _skip(d, scheduled_for, SkipReason.OVERLAP, f"{len(job.runs)} run(s) in flight")
        return True
    cap = 1 if policy == OverlapPolicy.BUFFER_ONE else BUFFER_CAP
    if len(job.buffered) >= cap:
        _skip(d, scheduled_for, SkipReason.OVERLAP, f"buffer full ({cap} held)")
        return True
    d.emit(JobChanged(job.job_id, "", job.version, job.status, "buffered", str(scheduled_for),
                      d.now))
    return True


def _skip(d: _Decision, scheduled_for: int, reason: SkipReason, detail: str) -> None:
    job = d.job
    d.emit(RunSkipped(run_id_for(job.job_id, scheduled_for), job.job_id, job.spec.team,
                      scheduled_for, reason, detail, d.now))


def _run_due(
    d: _Decision,
    run_id: str,
    scheduled_for: int,
    attempt: int,
    trigger: RunTrigger,
    *,
    not_before: int,
    flags: tuple[str, ...] = (),
) -> RunDue:
    """A dispatch of the job's current spec; the start deadline rides along as a flag."""
    job = d.job
    spec = job.spec
    start_by = max(not_before, d.now) + d.cfg.start_timeout_ms
    return RunDue(
        run_id=run_id, job_id=job.job_id, team=spec.team, pool=spec.pool, attempt=attempt,
        scheduled_for_ms=scheduled_for, not_before_ms=not_before, emitted_at_ms=d.now,
        trigger=trigger, executor=spec.executor, timeout_ms=spec.timeout_ms,
        lease_ms=spec.lease_ms, tz_version=d.cfg.tz_version,
        flags=(*flags, f"{START_BY_FLAG}{start_by}"),
    )


def _next_attempt(d: _Decision, run: RunState, trigger: RunTrigger, *, not_before: int) -> RunDue:
    """The same run again with ``attempt + 1`` (retry or lease expiry)."""
    return _run_due(d, run.run_id, run.scheduled_for_ms, run.attempt + 1, trigger,
                    not_before=not_before)


# ---------------------------------------------------------------------------
# decide: attempts ending (outcomes and run timers)


def _on_outcome(d: _Decision, outcome: Outcome) -> None:
    """Apply a worker's report if it is for the current attempt (fencing); else ignore it."""
    if d.state is None or not _accepts(d.state, outcome):
        return
    d.emit(outcome)
    match outcome:
        case RunSucceeded():
            _settle(d, outcome.run_id, RunStatus.SUCCEEDED, "", dead_letter=None)
        case RunFailed():
            code = "attempts_exhausted" if outcome.retryable else "not_retryable"
            detail = f"{outcome.error_class}: {outcome.error_message}"[:ERROR_TEXT_CAP]
            _after_attempt(d, outcome.run_id, RunStatus.FAILED, detail, code)
        case RunTimedOut():
            _after_attempt(d, outcome.run_id, RunStatus.TIMED_OUT, "timeout",
                           "attempts_exhausted")
        case _:
            pass  # RunStarted / RunHeartbeat: evolve records the lease


def _on_lease_lapsed(d: _Decision, run: RunState) -> None:
    """No start by the deadline, or no heartbeat before the lease ran out: a failed attempt."""
    reason = "start_timeout" if run.status is RunStatus.DUE else "lease_expired"
    d.emit(RunCancelled(run.run_id, d.job.job_id, run.attempt, reason, d.now))
    if run.attempt < d.job.spec.retry.max_attempts:
        # No backoff: the attempt did not fail on its own, its worker vanished.
        d.emit(_next_attempt(d, run, RunTrigger.LEASE_EXPIRED, not_before=d.now))
    else:
        _settle(d, run.run_id, RunStatus.FAILED, _ATTEMPT_ENDS[reason][1],
                dead_letter="attempts_exhausted")


def _on_timeout(d: _Decision, run: RunState) -> None:
    """The execution deadline passed: cancel the attempt, then treat it as a timed-out one."""
    d.emit(RunCancelled(run.run_id, d.job.job_id, run.attempt, "timeout", d.now))
    _after_attempt(d, run.run_id, RunStatus.TIMED_OUT, "timeout", "attempts_exhausted")


def _after_attempt(d: _Decision, run_id: str, status: RunStatus, detail: str, code: str) -> None:
    """After a failed attempt: evolve has put the run in RETRY_WAIT if it retries; else settle."""
    run = _find_run(d.job, run_id)
    if run is not None and run.status is not RunStatus.RETRY_WAIT:
        _settle(d, run_id, status, detail, dead_letter=code)


def _settle(
    d: _Decision,
    run_id: str,
    status: RunStatus,
    detail: str,
    dead_letter: str | None,
    *,
    follow_up: bool = True,
) -> None:
    """Settle a run; with ``follow_up``, then auto-pause and release the buffer as due."""
    job = d.job
    run = _find_run(job, run_id)
    assert run is not None  # callers settle runs they just found in the state
    letter = None if dead_letter is None else _dead_letter(d, run, dead_letter, detail)
    d.emit(RunSettled(run_id, job.job_id, job.spec.team, status, run.attempt,
                      run.scheduled_for_ms, d.now, detail))
    if letter is not None:
        d.emit(letter)
    if follow_up:
        _maybe_auto_pause(d)
        _dispatch_buffered(d)


def _dead_letter(d: _Decision, run: RunState, code: str, detail: str) -> DeadLetter:
    history = [
        {"attempt": r.attempt, "worker_id": r.worker_id, "outcome": r.outcome,
         "at_ms": r.at_ms, "error": r.error}
        for r in run.history
    ]
    return DeadLetter(
        source_topic="runs", partition=-1, offset=-1, key=d.job.job_id.encode(), value=None,
        reason=f"{code}: run {run.run_id} after {run.attempt} attempt(s): {detail}",
        at_ms=d.now, history_json=json.dumps(history, separators=(",", ":")),
    )


def _maybe_auto_pause(d: _Decision) -> None:
    job = d.job
    limit = job.spec.auto_pause_after
    if job.status is JobStatus.ACTIVE and 0 < limit <= job.consecutive_failures:
        d.emit(JobChanged(job.job_id, "", job.version, JobStatus.PAUSED, "auto_paused",
                          f"{job.consecutive_failures} consecutive failed runs", d.now))


def _dispatch_buffered(d: _Decision) -> None:
    """Release the oldest buffered occurrence once nothing of the job is in flight."""
    job = d.job
    if not job.buffered or job.runs:
        return
    scheduled_for = job.buffered[0]
    flags = _occurrence_at(job.spec.schedule, scheduled_for).flags
    run_id = run_id_for(job.job_id, scheduled_for)
    d.emit(_run_due(d, run_id, scheduled_for, 1, RunTrigger.SCHEDULED, not_before=d.now,
                    flags=flags))


def _maybe_complete(d: _Decision) -> None:
    """A live job with nothing left to do (no occurrence, run or buffer) is COMPLETED."""
    job = d.state
    if job is None or job.status not in _LIVE:
        return
    if job.next_fire_ms is None and not job.runs and not job.buffered:
        d.emit(JobChanged(job.job_id, "", job.version, JobStatus.COMPLETED, "completed",
                          "no further occurrences", d.now))


# ---------------------------------------------------------------------------
# Shared by decide and evolve


def _accepts(state: JobState, outcome: Outcome) -> bool:
    """Fencing: only the current attempt, one lease per attempt, results from its holder."""
    run = _find_run(state, outcome.run_id)
    if run is None or outcome.attempt != run.attempt or outcome.job_id != state.job_id:
        return False
    if isinstance(outcome, RunStarted):
        return run.status is RunStatus.DUE
    holder = run.status is RunStatus.RUNNING and run.worker_id == outcome.worker_id
    if isinstance(outcome, RunHeartbeat):
        return holder
    return holder or run.status is RunStatus.DUE


def _find_run(state: JobState, run_id: str) -> RunState | None:
    return next((run for run in state.runs if run.run_id == run_id), None)


def _next_fire(d: _Decision) -> int:
    fire = d.job.next_fire_ms
    assert fire is not None  # a FIRE timer exists only while next_fire_ms is set
    return fire


def _due(state: JobState, scheduled_for: int) -> int:
    """When an occurrence is due: its nominal time plus the job's spread/jitter offset."""
    spec = state.spec
    return scheduled_for + offset_ms(state.job_id, scheduled_for, spec.spread_ms, spec.jitter_ms)


def _occurrence_at(schedule: Schedule, scheduled_for: int) -> Occurrence:
    """The schedule's occurrence at exactly ``scheduled_for`` (for its flags and gap marker)."""
    # Asking from 1 ms before is enough in principle, but schedule.next_occurrence misses an
    # occurrence sitting exactly on a DST transition when asked from 1 ms before it (the
    # search starts in the new segment); cron instants are whole seconds, so 1 s before is
    # an equally exact question that avoids it.
    for before in (1, 1_000):
        try:
            occurrence = next_occurrence(schedule, scheduled_for - before)
        except ScheduleError:
            break
        if occurrence is not None and occurrence.at_ms == scheduled_for:
            return occurrence
    return Occurrence(at_ms=scheduled_for, local_iso="", flags=())


def _next_after(schedule: Schedule, after_ms: int) -> int | None:
    """The next occurrence, or None when there is none (or none within the search horizon)."""
    try:
        occurrence = next_occurrence(schedule, after_ms)
    except ScheduleError:
        return None  # evolve must be total: a schedule that runs dry simply completes
    return None if occurrence is None else occurrence.at_ms


def _first_fire(schedule: Schedule, accepted_at: int, last_scheduled: int | None) -> int | None:
    """The first occurrence of a new spec: see the module docstring (Create, Update)."""
    if isinstance(schedule, OneTime):
        if last_scheduled is None or schedule.at_ms > last_scheduled:
            return schedule.at_ms
        return None
    anchor = accepted_at - 1 if last_scheduled is None else max(accepted_at - 1, last_scheduled)
    return _next_after(schedule, anchor)


def _run_timers(job_id: str, run: RunState, team: str) -> tuple[Timer, ...]:
    if run.status is RunStatus.DUE:
        return (Timer(run.lease_until_ms, job_id, TimerKind.LEASE, run.run_id, team),)
    if run.status is RunStatus.RUNNING:
        return (
            Timer(run.lease_until_ms, job_id, TimerKind.LEASE, run.run_id, team),
            Timer(run.deadline_ms, job_id, TimerKind.TIMEOUT, run.run_id, team),
        )
    if run.status is RunStatus.RETRY_WAIT:
        return (Timer(run.retry_at_ms, job_id, TimerKind.RETRY, run.run_id, team),)
    return ()


# ---------------------------------------------------------------------------
# evolve


def evolve(state: JobState | None, event: Event) -> JobState | None:
    """The state after ``event``. Pure and total: events that do not apply leave it unchanged.

    Outcomes are re-checked with the same fencing as ``decide``, so folding the whole
    outcomes topic (stale reports included) gives the same state as folding only accepted ones.
    """
    if isinstance(event, JobAccepted):
        return _evolve_accepted(state, event)
    if state is None:
        return None
    match event:
        case RunDue():
            return _evolve_run_due(state, event)
        case RunSkipped():
            return _consume_occurrence(state, event.scheduled_for_ms)
        case RunCancelled():
            return _evolve_cancelled(state, event)
        case RunSettled():
            return _evolve_settled(state, event)
        case JobChanged():
            return _evolve_changed(state, event)
        case RunStarted() | RunHeartbeat() | RunSucceeded() | RunFailed() | RunTimedOut():
            return _evolve_outcome(state, event) if _accepts(state, event) else state
        case _:
            return state  # JobRejected, DeadLetter: answers, not changes


def _evolve_accepted(state: JobState | None, event: JobAccepted) -> JobState:
    """Create at version 1, or replace the spec and recompute the next occurrence."""
    if state is None:
        return JobState(
            job_id=event.job_id, spec=event.spec, version=event.version,
            status=JobStatus.ACTIVE,
            next_fire_ms=_first_fire(event.spec.schedule, event.at_ms, None),
            last_scheduled_ms=None,
            recent_command_ids=(event.command_id,) if event.command_id else (),
        )
    next_fire = _first_fire(event.spec.schedule, event.at_ms, state.last_scheduled_ms)
    status = state.status
    if status is JobStatus.COMPLETED and next_fire is not None:
        status = JobStatus.ACTIVE
    updated = replace(state, spec=event.spec, version=event.version, next_fire_ms=next_fire,
                      status=status)
    return _remember(updated, event.command_id)


def _evolve_run_due(state: JobState, event: RunDue) -> JobState:
    """A new run (scheduled or manual), or the next attempt of an existing one."""
    run = _find_run(state, event.run_id)
    if event.trigger in (RunTrigger.RETRY, RunTrigger.LEASE_EXPIRED):
        if run is None:
            return state
        attempt = replace(run, attempt=event.attempt, status=RunStatus.DUE, worker_id="",
                          lease_until_ms=start_deadline_ms(event), deadline_ms=0, retry_at_ms=0)
        return replace(state, runs=_runs_with(state, attempt), tz_version=event.tz_version)
    if run is not None:
        return state  # a second dispatch of the same run id changes nothing
    new = RunState(run_id=event.run_id, scheduled_for_ms=event.scheduled_for_ms,
                   attempt=event.attempt, status=RunStatus.DUE, trigger=event.trigger,
                   lease_until_ms=start_deadline_ms(event))
    buffered, last, nxt = state.buffered, state.last_scheduled_ms, state.next_fire_ms
    if event.trigger is RunTrigger.SCHEDULED:
        buffered, last, nxt = _consumed(state, event.scheduled_for_ms)
    # One replace, not three: this is the hot path of a hot instant.
    return replace(state, runs=(*state.runs, new), tz_version=event.tz_version,
                   buffered=buffered, last_scheduled_ms=last, next_fire_ms=nxt)


def _consume_occurrence(state: JobState, scheduled_for: int) -> JobState:
    buffered, last, nxt = _consumed(state, scheduled_for)
    return replace(state, buffered=buffered, last_scheduled_ms=last, next_fire_ms=nxt)


def _consumed(state: JobState, scheduled_for: int) -> tuple[tuple[int, ...], int | None, int | None]:
    """``(buffered, last_scheduled_ms, next_fire_ms)`` once an occurrence has been decided:
    it leaves the buffer, or the schedule advances past it (never backwards)."""
    if scheduled_for in state.buffered:
        buffered = tuple(t for t in state.buffered if t != scheduled_for)
        return buffered, state.last_scheduled_ms, state.next_fire_ms
    if state.last_scheduled_ms is not None and scheduled_for <= state.last_scheduled_ms:
        return state.buffered, state.last_scheduled_ms, state.next_fire_ms
    return state.buffered, scheduled_for, _next_after(state.spec.schedule, scheduled_for)


def _evolve_cancelled(state: JobState, event: RunCancelled) -> JobState:
    """A lapsed attempt (timeout, lease, start deadline) ends; other cancels await RunSettled."""
    ending = _ATTEMPT_ENDS.get(event.reason)
    run = _find_run(state, event.run_id)
    if ending is None or run is None or run.attempt != event.attempt:
        return state
    if run.status not in _IN_FLIGHT:
        return state
    outcome, error = ending
    record = AttemptRecord(run.attempt, run.worker_id, outcome, event.at_ms, error)
    return _attempt_ended(state, run, record, retryable=event.reason == "timeout")


def _evolve_outcome(state: JobState, outcome: Outcome) -> JobState:
    run = _find_run(state, outcome.run_id)
    assert run is not None  # _accepts checked it
    match outcome:
        case RunStarted():
            deadline = outcome.at_ms + state.spec.timeout_ms
            started = replace(run, status=RunStatus.RUNNING, worker_id=outcome.worker_id,
                              lease_until_ms=outcome.lease_until_ms, deadline_ms=deadline)
            return _with_run(state, started)
        case RunHeartbeat():
            lease = max(run.lease_until_ms, outcome.lease_until_ms)
            return _with_run(state, replace(run, lease_until_ms=lease))
        case RunFailed():
            error = f"{outcome.error_class}: {outcome.error_message}"[:ERROR_TEXT_CAP]
            record = AttemptRecord(run.attempt, outcome.worker_id, "failed", outcome.at_ms, error)
            return _attempt_ended(state, run, record, retryable=outcome.retryable)
        case RunTimedOut():
            record = AttemptRecord(run.attempt, outcome.worker_id, "timed_out", outcome.at_ms,
                                   "timeout")
            return _attempt_ended(state, run, record, retryable=True)
        case _:
            return state  # RunSucceeded: the RunSettled that follows removes the run


def _attempt_ended(
    state: JobState, run: RunState, record: AttemptRecord, *, retryable: bool
) -> JobState:
    """Record the attempt; wait for a retry if it may be retried and attempts remain."""
    run = replace(run, history=(*run.history, record)[-HISTORY_CAP:])
    retry = state.spec.retry
    if retryable and run.attempt < retry.max_attempts:
        retry_at = record.at_ms + backoff_ms(retry, run.run_id, run.attempt)
        run = replace(run, status=RunStatus.RETRY_WAIT, retry_at_ms=retry_at,
                      lease_until_ms=0, deadline_ms=0)
    return _with_run(state, run)


def _evolve_settled(state: JobState, event: RunSettled) -> JobState:
    if _find_run(state, event.run_id) is None:
        return state
    failures = state.consecutive_failures
    if event.status is RunStatus.SUCCEEDED:
        failures = 0
    elif event.status in (RunStatus.FAILED, RunStatus.TIMED_OUT):
        failures += 1
    runs = tuple(run for run in state.runs if run.run_id != event.run_id)
    return replace(state, runs=runs, consecutive_failures=failures)


def _evolve_changed(state: JobState, event: JobChanged) -> JobState | None:
    """Lifecycle changes take ``event.status``; DELETED is the tombstone."""
    if event.status is JobStatus.DELETED:
        return None
    state = _remember(state, event.command_id)
    if event.change == "buffered" and event.reason.lstrip("-").isdigit():
        state = _consume_occurrence(state, int(event.reason))
        state = replace(state, buffered=(*state.buffered, int(event.reason)))
    if event.status is JobStatus.CANCELLED:
        state = replace(state, next_fire_ms=None, buffered=(), runs=())
    if state.status is JobStatus.PAUSED and event.status is JobStatus.ACTIVE:
        state = replace(state, consecutive_failures=0)
    return replace(state, status=event.status)


def _remember(state: JobState, command_id: str) -> JobState:
    if not command_id or command_id in state.recent_command_ids:
        return state
    recent = (*state.recent_command_ids, command_id)[-RECENT_COMMANDS_KEPT:]
    return replace(state, recent_command_ids=recent)


def _with_run(state: JobState, run: RunState) -> JobState:
    return replace(state, runs=_runs_with(state, run))


def _runs_with(state: JobState, run: RunState) -> tuple[RunState, ...]:
    return tuple(run if r.run_id == run.run_id else r for r in state.runs)
