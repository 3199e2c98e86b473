"""The checker itself, on recorded histories made by hand: a clean one and a known-bad one."""

from __future__ import annotations

from tests.chaos.checker import check
from tests.chaos.recorder import CommandOutcome, CommandRecord, History, Seen, TargetCall
from tickwheel.replay.log import LogRecord
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    ExecutorSpec,
    JobAccepted,
    JobChanged,
    JobSpec,
    JobStatus,
    OneTime,
    RunDue,
    RunFailed,
    RunSettled,
    RunStarted,
    RunStatus,
    RunSucceeded,
    RunTrigger,
    run_id_for,
)

P = "t."
T = 1_767_225_600_000
SPEC = JobSpec("team", "job", OneTime(T), ExecutorSpec("http", '{"url": "http://127.0.0.1:1/effect"}'))


def _create(job: str) -> CreateJob:
    return CreateJob(CommandMeta(f"c-{job}", job, T - 10_000, "p"), SPEC)


def _due(job: str, attempt: int = 1) -> RunDue:
    trigger = RunTrigger.SCHEDULED if attempt == 1 else RunTrigger.LEASE_EXPIRED
    return RunDue(run_id_for(job, T), job, "team", "default", attempt, T, T, T, trigger,
                  SPEC.executor, 1_000, 5_000)


class _Log:
    def __init__(self) -> None:
        self.records: list[LogRecord] = []

    def add(self, role: str, event: object, at: int = T, partition: int = 0) -> LogRecord:
        offset = sum(1 for r in self.records if r.topic == P + role and r.partition == partition)
        job = getattr(event, "job_id", None) or event.meta.job_id  # type: ignore[attr-defined]
        record = LogRecord(P + role, partition, offset, at, job.encode(), mappers.to_bytes(event))  # type: ignore[arg-type]
        self.records.append(record)
        return record


def _clean_log() -> _Log:
    log = _Log()
    log.add("commands", _create("a"), T - 10_000)
    log.add("job-events", JobAccepted("a", "c-a", 1, SPEC, T - 9_000), T - 9_000)
    log.add("runs", _due("a"))
    log.add("outcomes", RunStarted(run_id_for("a", T), "a", 1, "w", T + 5_000, T + 10))
    log.add("job-events", RunSettled(run_id_for("a", T), "a", "team", RunStatus.SUCCEEDED, 1, T, T + 20))
    return log


def _history(log: _Log, **extra: object) -> History:
    fields: dict[str, object] = {
        "prefix": P, "commands": (), "concurrent": (), "log": tuple(log.records),
        "uncommitted_runs": (), "finished_ms": T + 120_000, **extra,
    }
    return History(**fields)  # type: ignore[arg-type]


def test_a_clean_history_has_no_problems() -> None:
    """One job created, dispatched once, started, settled, its effect applied once: all zeros."""
    calls = (TargetCall(run_id_for("a", T), run_id_for("a", T), 1, T + 15, True, 200),)
    commands = (CommandRecord(_create("a"), CommandOutcome.OK, T - 10_000),)
    result = check(_history(_clean_log(), target_calls=calls, commands=commands), settle=True, replay=False)
    assert result.problems() == {}
    assert (result.runs, result.dispatches) == (1, 1)


def test_a_known_bad_history_is_reported_in_every_column() -> None:
    """Duplicate dispatch, lost occurrence and command, aborted read, double effect, start after
    cancel, an unsettled run and an unexplained dispatch: each lands in its own column."""
    log = _clean_log()
    log.add("runs", _due("a"))  # the same (run id, attempt) again
    log.add("job-events", JobAccepted("lost", "c-lost", 1, SPEC, T - 9_000), T - 9_000)  # never decided
    log.add("job-events", JobAccepted("b", "c-b", 1, SPEC, T - 9_000), T - 9_000)
    log.add("runs", _due("b"))
    ack = JobChanged("b", "cancel-b", 1, JobStatus.CANCELLED, "cancelled", "", T + 50)
    log.add("job-events", ack, T + 50)
    log.add("outcomes", RunStarted(run_id_for("b", T), "b", 1, "w", T + 5_000, T + 90), T + 90)
    log.add("outcomes", RunSucceeded(run_id_for("b", T), "b", 1, "w", T + 95, ""), T + 95)  # it ran
    log.add("runs", _due("ghost", attempt=2))  # a retry of a run never dispatched
    aborted = Seen(P + "runs", 0, 99, b"aborted", T)
    calls = (
        TargetCall(run_id_for("a", T), "key-1", 1, T + 15, True, 200),
        TargetCall(run_id_for("a", T), "key-2", 2, T + 16, True, 200),  # a second key: twice
    )
    acked = CommandRecord(CancelJob(CommandMeta("never-answered", "a", T, "p")), CommandOutcome.OK, T)
    result = check(_history(log, concurrent=(aborted,), target_calls=calls, commands=(acked,)),
                   settle=True, replay=False)
    assert set(result.problems()) == {
        "lost", "lost_commands", "unexpected", "duplicates", "aborted_reads", "double_effects",
        "starts_after_cancel", "non_terminal",
    }
    assert list(result.duplicates) == [(run_id_for("a", T), 1)]
    assert result.lost == (f"lost@{T} ({run_id_for('lost', T)})",)


def test_a_lease_after_the_cancel_ack_is_a_start_only_if_the_attempt_then_ran() -> None:
    """A worker whose cancel check preceded the ack may write its lease after it; stopped by
    its second check before the call, it reports itself cancelled: no start. Called, it is."""
    def history(
        *after_lease: tuple[RunFailed | RunSucceeded, int], calls: tuple[TargetCall, ...] = ()
    ) -> History:
        log = _clean_log()
        log.add("job-events", JobAccepted("b", "c-b", 1, SPEC, T - 9_000), T - 9_000)
        log.add("runs", _due("b"))
        ack = JobChanged("b", "cancel-b", 1, JobStatus.CANCELLED, "cancelled", "", T + 50)
        log.add("job-events", ack, T + 50)
        log.add("outcomes", RunStarted(run_id_for("b", T), "b", 1, "w", T + 5_000, T + 40), T + 90)
        for event, at in after_lease:
            log.add("outcomes", event, at)
        return _history(log, target_calls=calls)

    stopped = RunFailed(run_id_for("b", T), "b", 1, "w", T + 95, False, "Cancelled", "cancelled")
    assert starts_after_cancel_of(history((stopped, T + 95))) == ()
    ran = RunSucceeded(run_id_for("b", T), "b", 1, "w", T + 95, "")
    assert len(starts_after_cancel_of(history((ran, T + 95)))) == 1
    call = TargetCall(run_id_for("b", T), "key-b", 1, T + 93, True, 200)
    assert len(starts_after_cancel_of(history((stopped, T + 95), calls=(call,)))) == 2  # lease and call


def starts_after_cancel_of(history: History) -> tuple[str, ...]:
    return check(history, replay=False).starts_after_cancel


def test_a_store_that_differs_from_the_changelog_is_a_state_mismatch() -> None:
    """Recovered RocksDB contents are compared with the latest changelog state per job."""
    result = check(_history(_clean_log()), replay=False, stores={"ghost": None, "a": None})
    assert result.state_mismatches == ()
    from tickwheel.schemas.model import JobState

    state = JobState("a", SPEC, 1, JobStatus.ACTIVE, T, None)
    mismatched = check(_history(_clean_log()), replay=False, stores={"a": state})
    assert len(mismatched.state_mismatches) == 1
