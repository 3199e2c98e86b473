"""Properties of the core over random input sequences (hypothesis).

A script is a list of actions against one job: clock advances (with and without look-ahead),
downtime jumps, commands (with re-used command ids), worker reports (current and stale
attempts, lease holder or not) and re-delivered old timers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.core_harness import HOUR, MINUTE, SECOND, T0, Harness, spec
from tickwheel.schemas.model import (
    CatchupPolicy,
    CronSchedule,
    JobChanged,
    JobSpec,
    JobStatus,
    OneTime,
    OverlapPolicy,
    RetryPolicy,
    RunDue,
    RunSkipped,
    RunTrigger,
    run_id_for,
)
from tickwheel.streams.core import CoreConfig, Event, decide, evolve, timers_of
from tickwheel.streams.schedule import occurrences, offset_ms
from tickwheel.streams.timers import Timer

SETTINGS = settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
CFG = CoreConfig(max_fires_per_timer=7, start_timeout_ms=3 * MINUTE, misfire_tolerance_ms=MINUTE)

schedules = st.one_of(
    st.sampled_from(
        [
            CronSchedule("* * * * *"),
            CronSchedule("*/2 * * * *"),
            CronSchedule("*/5 * * * *", "America/New_York"),
        ]
    ),
    st.integers(-2 * HOUR, 2 * HOUR).map(lambda d: OneTime(T0 + d)),
)

specs = st.builds(
    lambda schedule, overlap, catchup, window, spread, jitter, attempts, pause, timeout: spec(
        schedule,
        overlap=overlap,
        catchup=catchup,
        catchup_window_ms=window,
        spread_ms=spread,
        jitter_ms=jitter,
        retry=RetryPolicy(max_attempts=attempts, backoff_initial_ms=5 * SECOND,
                          backoff_max_ms=40 * SECOND),
        auto_pause_after=pause,
        timeout_ms=timeout,
        lease_ms=20 * SECOND,
    ),
    schedules,
    st.sampled_from(OverlapPolicy),
    st.sampled_from(CatchupPolicy),
    st.sampled_from([0, 5 * MINUTE, HOUR]),
    st.sampled_from([0, 90 * SECOND]),
    st.sampled_from([0, 10 * SECOND]),
    st.integers(1, 3),
    st.sampled_from([0, 2]),
    st.sampled_from([30 * SECOND, 10 * MINUTE]),
)

WORKER_ACTIONS = ["start", "heartbeat", "succeed", "fail", "fail_fatal", "timed_out"]
# Weighted: cancel and delete end a lifetime, so they come up less often than the others.
LIFECYCLE = ["pause", "resume", "resume", "trigger", "trigger", "cancel", "delete"]

clock_actions = st.one_of(
    st.tuples(st.just("advance"), st.integers(0, 5 * MINUTE), st.sampled_from([0, 3 * SECOND])),
    st.tuples(st.just("jump"), st.integers(0, 3 * HOUR)),
)
worker_actions = st.tuples(
    st.just("worker"), st.sampled_from(WORKER_ACTIONS), st.integers(0, 3),
    st.sampled_from(["w1", "w1", "w1", "w2"]), st.sampled_from([False, False, False, True]),
)
old_timer_actions = st.tuples(st.just("old_timer"), st.integers(0, 50))


def scripts(commands: list[str]) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    command_actions = st.tuples(st.just("cmd"), st.sampled_from(commands), st.integers(0, 6))
    return st.lists(
        st.one_of(clock_actions, clock_actions, command_actions, worker_actions,
                  worker_actions, worker_actions, old_timer_actions),
        min_size=10,
        max_size=40,
    )


@dataclass
class Run:
    """The outcome of a script: the harness plus what the checks need."""

    h: Harness
    created_at: int
    stopped_at: int | None = None  # when the first lifetime was cancelled or deleted
    seen_timers: list[Timer] = field(default_factory=list)


def run_script(job_spec: JobSpec, other: JobSpec, script: list[tuple[Any, ...]]) -> Run:
    """Apply the script; after every input check that each implied timer does something."""
    h = Harness(cfg=CFG, now=T0 - 30 * SECOND)
    h.create(job_spec, command_id="create")
    run = Run(h, created_at=h.now)
    for action in script:
        _act(run, action, other)
        _check_timers_are_live(h)
        run.seen_timers.extend(sorted(h.timers()))
    return run


def _act(run: Run, action: tuple[Any, ...], other: JobSpec) -> None:
    h = run.h
    kind = action[0]
    if kind == "advance":
        h.advance(h.now + action[1], lookahead_ms=action[2])
    elif kind == "jump":
        h.now += action[1]
        h.advance(h.now)
    elif kind == "cmd":
        _command(run, action[1], f"c{action[2]}", other)
    elif kind == "worker":
        _worker(h, *action[1:])
    elif run.seen_timers:
        h.apply(run.seen_timers[action[1] % len(run.seen_timers)])


def _command(run: Run, name: str, command_id: str, other: JobSpec) -> None:
    h = run.h
    live = h.state is not None and h.state.status is not JobStatus.CANCELLED
    if name in ("cancel", "delete") and run.stopped_at is None and live:
        run.stopped_at = h.now
    if name == "create":
        h.create(other, command_id=command_id)
    elif name == "update":
        if h.state is not None:
            h.update(other, command_id=command_id)
    else:
        getattr(h, name)(command_id=command_id)


def _worker(h: Harness, what: str, index: int, worker: str, stale: bool) -> None:
    if h.state is None or not h.state.runs:
        return
    target = h.state.runs[index % len(h.state.runs)]
    attempt = target.attempt - 1 if stale else target.attempt
    if what == "fail_fatal":
        h.fail(target.run_id, worker, retryable=False, attempt=attempt)
    elif what == "fail":
        h.fail(target.run_id, worker, attempt=attempt)
    else:
        getattr(h, what)(target.run_id, worker, attempt=attempt)


def _check_timers_are_live(h: Harness) -> None:
    """timers_of is exact: each implied timer, fired at its time, produces events."""
    for timer in timers_of(h.state):
        assert decide(h.state, timer, max(h.now, timer.due_ms), h.cfg), timer


def fold(events: list[Event]) -> Any:
    state = None
    for event in events:
        state = evolve(state, event)
    return state


def lifetimes(events: list[Event]) -> list[list[Event]]:
    """Split the log at each delete: a re-created job is a new job with a fresh history."""
    out: list[list[Event]] = [[]]
    for event in events:
        out[-1].append(event)
        if isinstance(event, JobChanged) and event.status is JobStatus.DELETED:
            out.append([])
    return out


ALL_COMMANDS = [*LIFECYCLE, "create", "update", "update"]


@SETTINGS
@given(specs, specs, scripts(ALL_COMMANDS))
def test_decide_and_evolve_are_deterministic(
    job_spec: JobSpec, other: JobSpec, script: list[tuple[Any, ...]]
) -> None:
    """The same inputs give the same events and the same state, run after run."""
    first = run_script(job_spec, other, script).h
    second = run_script(job_spec, other, script).h
    assert first.events == second.events
    assert first.state == second.state


@SETTINGS
@given(specs, specs, scripts(ALL_COMMANDS))
def test_folding_the_events_from_nothing_rebuilds_the_state(
    job_spec: JobSpec, other: JobSpec, script: list[tuple[Any, ...]]
) -> None:
    """Event sourcing: evolve folded over every emitted event equals the state step returned."""
    h = run_script(job_spec, other, script).h
    assert fold(h.events) == h.state


@SETTINGS
@given(specs, specs, scripts(ALL_COMMANDS))
def test_run_ids_are_unique_per_occurrence_and_attempt(
    job_spec: JobSpec, other: JobSpec, script: list[tuple[Any, ...]]
) -> None:
    """Scheduled run ids derive from (job, occurrence); no RunDue repeats a (run id, attempt)."""
    h = run_script(job_spec, other, script).h
    for life in lifetimes(h.events):
        dues = [e for e in life if isinstance(e, RunDue)]
        keys = [(d.run_id, d.attempt) for d in dues]
        assert len(keys) == len(set(keys))
        first_attempts = [d for d in dues if d.trigger is RunTrigger.SCHEDULED]
        for due in first_attempts:
            assert due.run_id == run_id_for(due.job_id, due.scheduled_for_ms)
            assert due.attempt == 1
        assert len({d.scheduled_for_ms for d in first_attempts}) == len(first_attempts)


@SETTINGS
@given(specs, scripts(LIFECYCLE))
def test_every_occurrence_until_cancel_is_dispatched_or_explained(
    job_spec: JobSpec, script: list[tuple[Any, ...]]
) -> None:
    """Invariant 1: each occurrence due while the job lived is in a RunDue or a RunSkipped."""
    run = run_script(job_spec, job_spec, script)
    h = run.h
    end = run.stopped_at if run.stopped_at is not None else h.now
    life = lifetimes(h.events)[0]
    decided = [
        e.scheduled_for_ms
        for e in life
        if (isinstance(e, RunDue) and e.trigger is RunTrigger.SCHEDULED and e.attempt == 1)
        or isinstance(e, RunSkipped)
    ]
    assert len(decided) == len(set(decided)), "an occurrence was decided twice"
    pending = set(h.state.buffered) if h.state is not None else set()
    for t in _expected_occurrences(job_spec, run.created_at, end, stopped=run.stopped_at):
        assert t in decided or t in pending, f"occurrence {t} was lost"


def _expected_occurrences(job_spec: JobSpec, created_at: int, end: int,
                          *, stopped: int | None) -> list[int]:
    """Occurrences the job owed: nominally by the stop, or due by the end of the script."""
    schedule = job_spec.schedule
    if isinstance(schedule, OneTime):
        candidates = [schedule.at_ms]
    else:
        candidates = [o.at_ms for o in occurrences(schedule, created_at - 1, 500) if o.at_ms <= end]
    return [
        t for t in candidates
        if (t <= end if stopped is not None
            else t + offset_ms("job-1", t, job_spec.spread_ms, job_spec.jitter_ms) <= end)
    ]
