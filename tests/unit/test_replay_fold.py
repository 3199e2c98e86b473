"""The fold of a log equals the processor's state: random histories driven through the pure core.

``SyntheticProcessor`` plays the processor's shell with a settable clock (batched inputs,
timers, one transaction per step, changelog after the events); replay then rebuilds every
job's state from runs/job-events/outcomes alone and must land on exactly the state the core
held, at the end and at every changelog record. ``verify`` must find such a log clean.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwheel.replay.history import matches, state_at
from tickwheel.replay.log import LogRecord
from tickwheel.replay.replayer import Replayer, Source
from tickwheel.replay.synth import SyntheticProcessor
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CatchupPolicy,
    Command,
    CommandMeta,
    CreateJob,
    CronSchedule,
    DeleteJob,
    ExecutorSpec,
    JobSpec,
    JobState,
    OneTime,
    Outcome,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RetryPolicy,
    RunFailed,
    RunHeartbeat,
    RunStarted,
    RunSucceeded,
    RunTimedOut,
    TriggerJob,
    UpdateJob,
)
from tickwheel.streams.core import CoreConfig

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND, MINUTE = 1_000, 60_000
JOBS = ("job-a", "job-b", "job-c")
CFG = CoreConfig(start_timeout_ms=3 * MINUTE, misfire_tolerance_ms=MINUTE, max_fires_per_timer=5)
SETTINGS = settings(max_examples=120, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

specs = st.builds(
    lambda schedule, overlap, attempts, pause_after: JobSpec(
        team="team-a", name="job", schedule=schedule, executor=ExecutorSpec("noop"),
        overlap=overlap, catchup=CatchupPolicy.ALL, catchup_window_ms=10 * MINUTE,
        retry=RetryPolicy(max_attempts=attempts, backoff_initial_ms=5 * SECOND,
                          backoff_max_ms=20 * SECOND),
        lease_ms=MINUTE, timeout_ms=4 * MINUTE, auto_pause_after=pause_after),
    st.one_of(st.sampled_from([CronSchedule("* * * * *"), CronSchedule("*/2 * * * *"),
                               CronSchedule("*/5 * * * *", "America/New_York")]),
              st.integers(-5 * MINUTE, 30 * MINUTE).map(lambda d: OneTime(T0 + d))),
    st.sampled_from(list(OverlapPolicy)),
    st.integers(1, 3),
    st.sampled_from([0, 2]),
)


@dataclass(frozen=True)
class Advance:
    by_ms: int
    lookahead_ms: int


@dataclass(frozen=True)
class Act:
    job: str
    kind: str
    spec: JobSpec | None = None
    second: str | None = None  # a second command for the same job in the same batch


@dataclass(frozen=True)
class Report:
    job: str
    kind: str
    worker: str
    stale: bool


_advances = st.builds(Advance, st.integers(SECOND // 2, 4 * MINUTE), st.sampled_from([0, 2 * SECOND]))
_commands = st.builds(
    Act, st.sampled_from(JOBS),
    st.sampled_from(["create", "update", "pause", "resume", "cancel", "trigger", "delete"]),
    specs, st.none() | st.sampled_from(["trigger", "pause", "resume", "cancel", "delete", "create",
                                        "update"]))
_reports = st.builds(
    Report, st.sampled_from(JOBS),
    st.sampled_from(["start", "start", "heartbeat", "succeed", "succeed", "fail", "fail_final",
                     "timed_out"]),
    st.sampled_from(["w1", "w2"]), st.booleans())
_creates = st.lists(st.builds(Act, st.sampled_from(JOBS), st.just("create"), specs,
                              st.none() | st.just("trigger")), min_size=1, max_size=3)
# Jobs are created first, and worker reports are as likely as everything else together, so
# that most scripts exercise leases, retries, fencing and settlement, not just rejections.
actions = st.tuples(
    _creates, st.lists(st.one_of(_advances, _commands, _reports, _reports, _advances),
                       min_size=1, max_size=40),
).map(lambda parts: [*parts[0], *parts[1]])


@dataclass
class _Script:
    proc: SyntheticProcessor
    seq: int = 0

    def meta(self, job: str) -> CommandMeta:
        self.seq += 1
        return CommandMeta(f"cmd-{self.seq}", job, self.proc.now, "alice")

    def command(self, act: Act, kind: str) -> Command | None:
        state = self.proc.state(act.job)
        meta = self.meta(act.job)
        assert act.spec is not None
        simple: dict[str, Callable[[CommandMeta], Command]] = {
            "pause": PauseJob, "resume": ResumeJob, "cancel": CancelJob, "trigger": TriggerJob,
            "delete": DeleteJob}
        if kind == "create":
            return CreateJob(meta, act.spec)
        if kind == "update":
            version = state.version if state is not None else 1
            return UpdateJob(meta, act.spec, version)
        return simple[kind](meta)

    def report(self, rep: Report) -> Outcome | None:
        state = self.proc.state(rep.job)
        if state is None or not state.runs:
            return None
        run = state.runs[0]
        attempt = max(1, run.attempt - 1) if rep.stale else run.attempt
        now = self.proc.now + 1
        args = (run.run_id, rep.job, attempt, rep.worker)
        makers: dict[str, Callable[[], Outcome]] = {
            "start": lambda: RunStarted(*args, now + MINUTE, now),
            "heartbeat": lambda: RunHeartbeat(*args, now + MINUTE, now),
            "succeed": lambda: RunSucceeded(*args, now, "ok"),
            "fail": lambda: RunFailed(*args, now, True, "Boom", "transient"),
            "fail_final": lambda: RunFailed(*args, now, False, "Boom", "fatal"),
            "timed_out": lambda: RunTimedOut(*args, now),
        }
        return makers[rep.kind]()

    def run(self, script: list[Advance | Act | Report]) -> None:
        for action in script:
            if isinstance(action, Advance):
                self.proc.advance(self.proc.now + action.by_ms, action.lookahead_ms)
            elif isinstance(action, Act):
                batch = [self.command(action, action.kind)]
                if action.second is not None:
                    batch.append(self.command(action, action.second))
                self.proc.batch([c for c in batch if c is not None], self.proc.now + 1)
            else:
                outcome = self.report(action)
                if outcome is not None:
                    self.proc.outcome(outcome, self.proc.now + 1)


def _simulate(script: list[Advance | Act | Report]) -> SyntheticProcessor:
    proc = SyntheticProcessor(partitions=2, cfg=CFG, now=T0)
    _Script(proc).run(script)
    proc.advance(proc.now + 10 * MINUTE)  # let every pending timer play out
    return proc


@SETTINGS
@given(actions)
def test_fold_of_the_log_equals_the_core_state_at_the_end(script: list[Advance | Act | Report]) -> None:
    """Folding runs/job-events/outcomes with evolve rebuilds exactly the state the core held."""
    proc = _simulate(script)
    result = Replayer().replay(proc.records)
    for job_id in JOBS:
        expected = proc.state(job_id)
        if job_id not in result.histories:
            assert expected is None
            continue
        assert state_at(result.history(job_id), proc.now) == expected


@SETTINGS
@given(actions)
def test_fold_agrees_with_every_changelog_record(script: list[Advance | Act | Report]) -> None:
    """At each sched-changelog record, the fold up to that record's timestamp equals it."""
    proc = _simulate(script)
    result = Replayer().replay(proc.records)
    for history in result.histories.values():
        for record in history.changelog:
            stored = record.event if isinstance(record.event, JobState) else None
            assert state_at(history, record.cite.timestamp) == stored, record.cite


@SETTINGS
@given(actions)
def test_a_log_the_core_wrote_verifies_clean(script: list[Advance | Act | Report]) -> None:
    """No invariant fires on a log written by the core itself (no false positives)."""
    proc = _simulate(script)
    result = Replayer(Source(grace_ms=0)).replay(proc.records)
    report = result.verify(T0 - 60 * MINUTE, proc.now)
    assert report.violations == (), [v.message for v in report.violations]


def _one_time(at_ms: int, **overrides: object) -> JobSpec:
    base = JobSpec(team="team-a", name="job", schedule=OneTime(at_ms), executor=ExecutorSpec("noop"))
    return replace(base, **overrides)  # type: ignore[arg-type]


def _final_fold(proc: SyntheticProcessor, records: list[LogRecord] | None = None) -> JobState | None:
    result = Replayer().replay(proc.records if records is None else records)
    return state_at(result.history("j"), proc.now)


def test_create_and_trigger_decided_in_one_step_fold_in_emission_order() -> None:
    """JobAccepted first, then the manual RunDue, though the runs topic is folded first."""
    proc = SyntheticProcessor(now=T0)
    proc.batch([CreateJob(CommandMeta("c1", "j", T0, "a"), _one_time(T0 + 60 * MINUTE)),
                TriggerJob(CommandMeta("c2", "j", T0, "a"))], T0 + 1)
    assert len(proc.state("j").runs) == 1  # type: ignore[union-attr]
    assert _final_fold(proc) == proc.state("j")


def test_an_occurrence_buffered_and_released_in_one_step_folds_in_emission_order() -> None:
    """FIRE buffers an occurrence, the LEASE timer of the held run then releases it: same step."""
    proc = SyntheticProcessor(now=T0, cfg=CoreConfig(start_timeout_ms=2 * MINUTE))
    spec = replace(_one_time(0), schedule=CronSchedule("*/2 * * * *"),
                   overlap=OverlapPolicy.BUFFER_ONE, retry=RetryPolicy(max_attempts=1))
    proc.command(CreateJob(CommandMeta("c1", "j", T0, "a"), spec), T0 + 1)
    proc.advance(T0 + 10 * MINUTE)  # nobody starts the runs: each lapses as the next is due
    assert any(getattr(e, "change", "") == "buffered" for e in _events(proc))
    assert _final_fold(proc) == proc.state("j")


def test_a_worker_clock_running_ahead_is_absorbed_by_the_processors_evidence() -> None:
    """A retryable failure stamped 5 s in the future still folds before the retry it caused."""
    proc = SyntheticProcessor(now=T0)
    spec = _one_time(T0 + MINUTE, retry=RetryPolicy(max_attempts=3, backoff_initial_ms=1_000,
                                                    backoff_max_ms=1_000))
    proc.command(CreateJob(CommandMeta("c1", "j", T0, "a"), spec), T0 + 1)
    proc.advance(T0 + MINUTE)
    run = proc.state("j").runs[0]  # type: ignore[union-attr]
    proc.outcome(RunStarted(run.run_id, "j", 1, "w1", proc.now + MINUTE, proc.now + 1))
    proc.outcome(RunFailed(run.run_id, "j", 1, "w1", proc.now + 1, True, "E", "flaky"))
    proc.advance(proc.now + 5_000)  # the retry (attempt 2) is dispatched after ~1 s
    skewed = [replace(r, timestamp=r.timestamp + 5_000) if _is_failure(r) else r for r in proc.records]
    assert _final_fold(proc, skewed) == proc.state("j")
    assert proc.state("j").runs[0].attempt == 2  # type: ignore[union-attr]


def _events(proc: SyntheticProcessor) -> list[object]:
    return [mappers.from_bytes(r.value) for r in proc.records if r.value is not None]


def _is_failure(record: LogRecord) -> bool:
    return record.value is not None and isinstance(mappers.from_bytes(record.value), RunFailed)


def test_an_update_decided_before_a_timeout_in_one_step_governs_the_retry() -> None:
    """Inputs before timers: the new spec's backoff times the retry of a run timing out then."""
    proc = SyntheticProcessor(now=T0)
    old = _one_time(T0 + MINUTE, timeout_ms=MINUTE, retry=RetryPolicy(
        max_attempts=3, backoff_initial_ms=1_000, backoff_max_ms=1_000))
    proc.command(CreateJob(CommandMeta("c1", "j", T0, "a"), old), T0 + 1)
    proc.advance(T0 + MINUTE)
    run = proc.state("j").runs[0]  # type: ignore[union-attr]
    proc.outcome(RunStarted(run.run_id, "j", 1, "w1", proc.now + 10 * MINUTE, proc.now + 1))
    deadline = proc.state("j").runs[0].deadline_ms  # type: ignore[union-attr]
    new = replace(old, retry=RetryPolicy(max_attempts=3, backoff_initial_ms=30_000,
                                         backoff_max_ms=30_000))
    proc.batch([UpdateJob(CommandMeta("c2", "j", proc.now, "a"), new, 1)], deadline - proc.lag_ms)
    assert proc.state("j").runs[0].retry_at_ms >= deadline + 20_000  # type: ignore[union-attr]
    assert _final_fold(proc) == proc.state("j")


def test_a_report_fetched_one_step_after_it_was_written_still_matches_the_changelog() -> None:
    """A failure written before the step that applied the start, but fetched after it: the
    changelog record of that step equals a cut of the fold, and verify stays clean."""
    proc = SyntheticProcessor(now=T0)
    spec = _one_time(T0 + MINUTE, retry=RetryPolicy(max_attempts=3, backoff_initial_ms=1_000,
                                                    backoff_max_ms=1_000))
    proc.command(CreateJob(CommandMeta("c1", "j", T0, "a"), spec), T0 + 1)
    proc.advance(T0 + MINUTE)
    run = proc.state("j").runs[0]  # type: ignore[union-attr]
    started = proc.now + 1
    proc.outcome(RunStarted(run.run_id, "j", 1, "w1", started + MINUTE, started))
    proc.outcome(RunFailed(run.run_id, "j", 1, "w1", proc.now + 1, True, "E", "flaky"))
    proc.advance(proc.now + 5_000)
    early = [replace(r, timestamp=started + 1) if _is_failure(r) else r for r in proc.records]
    result = Replayer(Source(grace_ms=0)).replay(early)
    history = result.history("j")
    start_step = next(r for r in history.changelog if r.cite.timestamp >= started)
    assert state_at(history, start_step.cite.timestamp) != start_step.event  # folded one step early
    assert matches(history, start_step)[0]
    assert result.state_at(start_step.cite.timestamp, "j").jobs[0].agrees
    assert result.verify(T0, proc.now).violations == ()
