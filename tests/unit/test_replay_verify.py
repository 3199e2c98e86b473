"""``verify``: each invariant caught on a core-written log with one precise edit, and only then."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tickwheel.replay import Invariant, Replayer, Source, VerifyReport
from tickwheel.replay.log import LogRecord, Role, role_of
from tickwheel.replay.synth import SyntheticProcessor
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    CronSchedule,
    ExecutorSpec,
    JobSpec,
    JobState,
    JobStatus,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RetryPolicy,
    RunDue,
    RunFailed,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunStatus,
    RunSucceeded,
    UpdateJob,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
Edit = Callable[[LogRecord, object], object | None]  # new event, or None to drop the record


def _spec(expr: str = "* * * * *", **overrides: object) -> JobSpec:
    base = JobSpec(team="team-a", name="job", schedule=CronSchedule(expr),
                   executor=ExecutorSpec("noop"), overlap=OverlapPolicy.ALLOW,
                   retry=RetryPolicy(max_attempts=3, backoff_initial_ms=1_000, backoff_max_ms=2_000))
    return replace(base, **overrides)  # type: ignore[arg-type]


def _command(proc: SyntheticProcessor, kind: type, *args: object) -> None:
    proc.command(kind(CommandMeta(f"{kind.__name__}-{proc.now}", "j", proc.now, "alice"), *args),
                 proc.now + 1)


def _work(proc: SyntheticProcessor, until: int, fail_first: bool = False) -> None:
    """Advance minute by minute; a worker runs each dispatch (failing attempt 1 if asked)."""
    while proc.now < until:
        for event in proc.advance(min(until, proc.now + MINUTE)):
            if isinstance(event, RunDue):
                ids = (event.run_id, event.job_id, event.attempt, "w1")
                at = proc.now + 10
                proc.outcome(RunStarted(*ids, at + MINUTE, at))
                if fail_first and event.attempt == 1:
                    proc.outcome(RunFailed(*ids, at + 5, True, "E", "flaky"))
                else:
                    proc.outcome(RunSucceeded(*ids, at + 5, "ok"))


def _history(fail_first: bool = False) -> SyntheticProcessor:
    """A cron job created at T0, run for 5 minutes, paused 3, resumed, run 3 more, cancelled."""
    proc = SyntheticProcessor(now=T0)
    _command(proc, CreateJob, _spec())
    _work(proc, T0 + 5 * MINUTE, fail_first)
    _command(proc, PauseJob)
    _work(proc, T0 + 8 * MINUTE)
    _command(proc, ResumeJob)
    _work(proc, T0 + 11 * MINUTE, fail_first)
    _command(proc, CancelJob)
    return proc


def _edit(records: list[LogRecord], edit: Edit) -> list[LogRecord]:
    out: list[LogRecord] = []
    for record in records:
        event = mappers.from_bytes(record.value) if record.value is not None else None
        changed = edit(record, event)
        if changed is None:
            continue
        value = record.value if changed is event else mappers.to_bytes(changed)  # type: ignore[arg-type]
        out.append(replace(record, value=value))
    return out


def _verify(records: list[LogRecord], *, to_ms: int = T0 + 20 * MINUTE, grace_ms: int = 0,
            from_ms: int = T0) -> VerifyReport:
    return Replayer(Source(grace_ms=grace_ms)).replay(records).verify(from_ms, to_ms)


def _kinds(report: VerifyReport) -> list[Invariant]:
    return [v.invariant for v in report.violations]


def test_a_core_written_history_with_pause_retry_and_cancel_is_clean() -> None:
    """No false positive: pause skips, retries and a cancel all keep the invariants."""
    report = _verify(_history(fail_first=True).records)
    assert report.violations == ()
    assert report.checked["occurrences"] == 11  # 00:01 .. 00:11, paused ones included


def test_a_duplicate_run_due_is_flagged_with_both_records() -> None:
    """The same (run id, attempt) committed twice: both offsets cited."""
    records = _history().records
    first = next(r for r in records if _is(r, RunDue))
    copy = replace(first, offset=1 + max(r.offset for r in records if r.topic == first.topic),
                   timestamp=first.timestamp + 5)
    report = _verify([*records, copy])
    assert _kinds(report) == [Invariant.DUPLICATE_RUN_DUE]
    assert report.violations[0].events == (_cite(first), _cite(copy))


def test_a_paused_occurrence_without_its_skip_is_lost() -> None:
    """Paused occurrences are explained by RunSkipped(paused); one without it is lost."""
    records = _history().records
    skips = [r for r in records if _is(r, RunSkipped)]
    dropped = mappers.from_bytes(skips[1].value)  # type: ignore[arg-type]
    report = _verify([r for r in records if r != skips[1]])
    assert _kinds(report) == [Invariant.LOST_OCCURRENCE]
    assert report.violations[0].at_ms == dropped.scheduled_for_ms  # type: ignore[union-attr]
    accepted = next(r for r in records if role_of(r.topic) is Role.JOB_EVENTS)
    assert report.violations[0].events == (_cite(accepted),)


def test_an_undecided_occurrence_within_grace_of_the_end_is_not_yet_judged() -> None:
    """An occurrence due 30 s before the log's end and not decided: fine within a 60 s grace,
    lost without one."""
    proc = SyntheticProcessor(now=T0)
    _command(proc, CreateJob, _spec())
    _work(proc, T0 + 5 * MINUTE - 1)  # the processor stalls just before 00:05
    end = T0 + 5 * MINUTE + 30_000

    def report(grace_ms: int) -> VerifyReport:
        source = Source(grace_ms=grace_ms, end_ms=end)
        return Replayer(source).replay(proc.records).verify(T0, end)

    assert report(MINUTE).violations == ()
    assert [(v.invariant, v.at_ms) for v in report(0).violations] == [
        (Invariant.LOST_OCCURRENCE, T0 + 5 * MINUTE)]


def test_occurrences_follow_the_spec_version_in_force() -> None:
    """After an update to every 2 minutes, odd minutes are not expected; a lost even one is."""
    proc = SyntheticProcessor(now=T0)
    _command(proc, CreateJob, _spec())
    _work(proc, T0 + 3 * MINUTE + 30_000)
    _command(proc, UpdateJob, _spec("*/2 * * * *"), 1)
    _work(proc, T0 + 12 * MINUTE)
    assert _verify(proc.records, to_ms=T0 + 12 * MINUTE).violations == ()
    lost = T0 + 8 * MINUTE
    records = _edit(proc.records, lambda r, e: None if isinstance(e, RunDue)
                    and e.scheduled_for_ms == lost else e)
    report = _verify(records, to_ms=T0 + 12 * MINUTE)
    assert [(v.invariant, v.at_ms) for v in report.violations] == [(Invariant.LOST_OCCURRENCE, lost)]
    assert "of spec v2" in report.violations[0].message


def test_a_start_after_the_cancel_ack_is_flagged() -> None:
    """A RunStarted timestamped after JobChanged(cancelled): the start, the ack and the dispatch."""
    proc = SyntheticProcessor(now=T0)
    _command(proc, CreateJob, _spec())
    proc.advance(T0 + 2 * MINUTE)  # two runs dispatched, nobody starts them
    _command(proc, CancelJob)
    run = mappers.from_bytes(next(r for r in proc.records if _is(r, RunDue)).value)  # type: ignore[arg-type]
    assert isinstance(run, RunDue)
    proc.outcome(RunStarted(run.run_id, "j", 1, "zombie", proc.now + MINUTE, proc.now + 100))
    report = _verify(proc.records)
    assert _kinds(report) == [Invariant.STARTED_AFTER_CANCEL]
    start, ack, due = report.violations[0].events
    assert (start.topic, ack.topic, due.topic) == ("tickwheel.outcomes", "tickwheel.job-events",
                                                   "tickwheel.runs")


def test_a_settlement_of_a_stale_attempt_is_flagged() -> None:
    """RunSettled naming attempt 1 after attempt 2 was dispatched: stale attempt accepted."""
    records = _edit(_history(fail_first=True).records,
                    lambda r, e: replace(e, attempts=1) if isinstance(e, RunSettled)
                    and e.attempts == 2 and e.scheduled_for_ms == T0 + MINUTE else e)
    report = _verify(records)
    assert _kinds(report) == [Invariant.STALE_ATTEMPT_ACCEPTED]
    assert "current attempt was 2" in report.violations[0].message


def test_a_success_only_a_stale_attempt_reported_is_flagged() -> None:
    """Attempt 2 settled succeeded while only attempt 1 ever reported success."""
    records = _edit(_history(fail_first=True).records, _stale_success(T0 + MINUTE))
    report = _verify(records)
    assert _kinds(report) == [Invariant.STALE_ATTEMPT_ACCEPTED]
    assert "only other attempts reported success" in report.violations[0].message


def test_a_retry_caused_by_another_attempt_is_flagged() -> None:
    """A retry as attempt 2 with only attempt 2's failure on record (attempt 1's relabelled)."""
    records = _edit(_history(fail_first=True).records,
                    lambda r, e: replace(e, attempt=5) if isinstance(e, RunFailed)
                    and e.run_id == _first_run(r, e) else e)
    report = _verify(records)
    assert _kinds(report) == [Invariant.STALE_ATTEMPT_ACCEPTED]
    assert "retried as attempt 2" in report.violations[0].message


def test_a_changelog_showing_a_worker_on_an_attempt_it_never_started_is_flagged() -> None:
    """Fencing in the state: RUNNING attempt 2 held by a worker that only started attempt 1."""
    proc = SyntheticProcessor(now=T0)
    _command(proc, CreateJob, _spec())
    proc.advance(T0 + MINUTE)
    due = mappers.from_bytes(next(r for r in proc.records if _is(r, RunDue)).value)  # type: ignore[arg-type]
    assert isinstance(due, RunDue)
    proc.outcome(RunStarted(due.run_id, "j", 1, "w1", proc.now + MINUTE, proc.now + 10))
    records = _edit(proc.records, lambda r, e: replace(e, runs=tuple(
        replace(run, attempt=2) if run.status is RunStatus.RUNNING else run for run in e.runs))
        if isinstance(e, JobState) else e)
    report = _verify(records, to_ms=T0 + 2 * MINUTE)
    # The edited state also no longer matches the fold of the log, which is reported too.
    assert _kinds(report) == [Invariant.STALE_ATTEMPT_ACCEPTED, Invariant.STATE_DIFFERS]
    assert "running attempt 2" in report.violations[0].message


def test_a_changelog_that_differs_from_the_fold_is_flagged_field_by_field() -> None:
    """The latest changelog state edited (status): state_differs names the field."""
    records = _history().records
    last = max((r for r in records if role_of(r.topic) is Role.CHANGELOG), key=lambda r: r.offset)
    records = _edit(records, lambda r, e: replace(e, status=JobStatus.PAUSED)
                    if r == last and isinstance(e, JobState) else e)
    report = _verify(records)
    assert _kinds(report) == [Invariant.STATE_DIFFERS]
    assert "status: fold=<JobStatus.CANCELLED: 'cancelled'>" in report.violations[0].message
    assert report.to_json()["violation_counts"] == {"state_differs": 1}


def test_undecodable_records_and_unknown_topics_are_warnings_not_violations() -> None:
    """Garbage on a topic and a stray topic are reported; they do not break the invariants."""
    records = _history().records
    garbage = replace(records[0], offset=999, value=b"\x00nonsense")
    stray = replace(records[0], topic="somewhere.else", offset=0)
    report = _verify([*records, garbage, stray])
    assert report.clean
    assert any("undecodable record tickwheel.commands[0]@999" in w for w in report.warnings)
    assert any("'somewhere.else'" in w for w in report.warnings)


def _is(record: LogRecord, kind: type) -> bool:
    return record.value is not None and isinstance(mappers.from_bytes(record.value), kind)


def _cite(record: LogRecord) -> object:
    from tickwheel.replay.log import cite_of

    return cite_of(record)


def _first_run(record: LogRecord, event: object) -> str:
    from tickwheel.schemas.model import run_id_for

    return run_id_for("j", T0 + MINUTE)


def _stale_success(scheduled_for: int) -> Edit:
    """Attempt 2's RunSucceeded relabelled as attempt 1's, so only a stale attempt reported."""
    from tickwheel.schemas.model import run_id_for

    run_id = run_id_for("j", scheduled_for)

    def edit(record: LogRecord, event: object) -> object | None:
        if isinstance(event, RunSucceeded) and event.run_id == run_id:
            return replace(event, attempt=1)
        return event

    return edit
