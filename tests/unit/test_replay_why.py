"""``why``: every verdict on small histories written by the pure core (SyntheticProcessor)."""

from __future__ import annotations

from dataclasses import replace

from tickwheel.replay import Replayer, ReplayResult, Verdict
from tickwheel.replay.log import LogRecord
from tickwheel.replay.synth import SyntheticProcessor
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    CancelJob,
    CatchupPolicy,
    CommandMeta,
    CreateJob,
    CronSchedule,
    DeleteJob,
    ExecutorSpec,
    JobSpec,
    OneTime,
    OverlapPolicy,
    RetryPolicy,
    RunDue,
    RunStarted,
    RunSucceeded,
)
from tickwheel.streams.core import DEFAULT_START_TIMEOUT_MS, CoreConfig

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000


def _spec(schedule: CronSchedule | OneTime | None = None, **overrides: object) -> JobSpec:
    base = JobSpec(team="team-a", name="job", schedule=schedule or CronSchedule("* * * * *"),
                   executor=ExecutorSpec("noop"))
    return replace(base, **overrides)  # type: ignore[arg-type]


def _proc(start_timeout_ms: int = DEFAULT_START_TIMEOUT_MS) -> SyntheticProcessor:
    return SyntheticProcessor(now=T0, cfg=CoreConfig(start_timeout_ms=start_timeout_ms))


def _meta(proc: SyntheticProcessor, job: str, tag: str) -> CommandMeta:
    return CommandMeta(f"{tag}-{job}", job, proc.now, "alice")


def _create(proc: SyntheticProcessor, job: str, spec: JobSpec) -> None:
    proc.command(CreateJob(_meta(proc, job, "create"), spec), proc.now + 1)


def _replay(proc: SyntheticProcessor, records: list[LogRecord] | None = None) -> ReplayResult:
    return Replayer().replay(proc.records if records is None else records)


def _succeed_all(proc: SyntheticProcessor, worker: str = "w1") -> None:
    for state in proc.states.values():
        for run in state.runs if state is not None else ():
            at = proc.now + 10
            ids = (run.run_id, state.job_id, run.attempt, worker)  # type: ignore[union-attr]
            proc.outcome(RunStarted(*ids, at + MINUTE, at))
            proc.outcome(RunSucceeded(*ids, at + 5, "ok"))


def test_an_occurrence_before_the_job_existed_was_never_due() -> None:
    """A cron occurrence before the JobAccepted: never due, the job was not yet created."""
    proc = _proc()
    proc.advance(T0 + 10 * MINUTE)
    _create(proc, "j", _spec())
    answer = _replay(proc).why("j", T0 + 2 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.NEVER_DUE, "not_yet_created")


def test_an_occurrence_after_the_cancel_is_cancelled_citing_the_command() -> None:
    """After the cancel acknowledgement: cancelled, with the CancelJob and JobChanged cited."""
    proc = _proc()
    _create(proc, "j", _spec())
    proc.advance(T0 + 3 * MINUTE)
    _succeed_all(proc)
    proc.command(CancelJob(_meta(proc, "j", "cancel")), proc.now + 1)
    proc.advance(T0 + 10 * MINUTE)
    answer = _replay(proc).why("j", T0 + 8 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.CANCELLED, "job_cancelled")
    texts = [link.text for link in answer.chain]
    assert any(t.startswith("CancelJob by alice") for t in texts)
    assert any(t.startswith("JobChanged cancelled") for t in texts)


def test_an_occurrence_after_a_delete_is_cancelled_as_deleted() -> None:
    """A deleted job: its later occurrences name the delete."""
    proc = _proc()
    _create(proc, "j", _spec())
    proc.advance(T0 + 2 * MINUTE)
    proc.command(DeleteJob(_meta(proc, "j", "delete")), proc.now + 1)
    answer = _replay(proc).why("j", T0 + 5 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.CANCELLED, "job_deleted")


def test_an_occurrence_after_the_end_of_the_log_is_pending() -> None:
    """Not due by the end of the log (within grace): pending, not lost."""
    proc = _proc()
    _create(proc, "j", _spec())
    proc.advance(T0 + 2 * MINUTE)
    answer = _replay(proc).why("j", T0 + 30 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.PENDING, "not_yet_due")


def test_an_occurrence_the_log_never_decided_is_lost() -> None:
    """Its RunDue removed from the log: lost (invariant 1 broken), citing the spec."""
    proc = _proc()
    _create(proc, "j", _spec(overlap=OverlapPolicy.ALLOW))
    proc.advance(T0 + 10 * MINUTE)
    gone = T0 + 3 * MINUTE
    records = [r for r in proc.records if not _is_due_for(r, gone)]
    answer = _replay(proc, records).why("j", gone + 5_000)
    assert (answer.verdict, answer.reason, answer.scheduled_for_ms) == (Verdict.LOST, "lost", gone)
    assert any(link.text.startswith("JobAccepted v1") for link in answer.chain)


def test_a_buffered_occurrence_not_yet_released_is_buffered() -> None:
    """overlap=buffer_one with a run in flight: the next occurrence is held, not dispatched."""
    proc = _proc()
    _create(proc, "j", _spec(overlap=OverlapPolicy.BUFFER_ONE))
    proc.advance(T0 + MINUTE)
    proc.advance(T0 + 2 * MINUTE)
    answer = _replay(proc).why("j", T0 + 2 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.BUFFERED, "overlap")


def test_a_missed_occurrence_outside_the_catch_up_window_is_skipped() -> None:
    """Downtime beyond the catch-up window: RunSkipped(outside_catchup_window) explains it."""
    proc = _proc()
    _create(proc, "j", _spec(catchup=CatchupPolicy.ALL, catchup_window_ms=2 * MINUTE,
                             overlap=OverlapPolicy.ALLOW))
    proc.now = T0 + 30 * MINUTE  # the processor was down: its clock jumps
    proc.advance(T0 + 30 * MINUTE)
    answer = _replay(proc).why("j", T0 + 5 * MINUTE)
    assert (answer.verdict, answer.reason) == (Verdict.SKIPPED, "outside_catchup_window")


def test_a_job_never_accepted_was_never_due() -> None:
    """An invalid create is rejected: nothing was ever due."""
    proc = _proc()
    _create(proc, "j", _spec(CronSchedule("not a cron")))
    answer = _replay(proc).why("j", T0)
    assert (answer.verdict, answer.reason) == (Verdict.NEVER_DUE, "never_created")
    assert any(link.text.startswith("JobRejected") for link in answer.chain)


def test_a_lapsed_lease_shows_as_an_attempt_and_a_stale_report_is_marked() -> None:
    """Attempt 1 loses its lease, attempt 2 succeeds; attempt 1's late success is marked stale."""
    proc = _proc(start_timeout_ms=MINUTE)
    _create(proc, "j", _spec(OneTime(T0 + MINUTE), retry=RetryPolicy(max_attempts=3)))
    proc.advance(T0 + MINUTE)
    run = proc.states["j"].runs[0]  # type: ignore[union-attr]
    proc.outcome(RunStarted(run.run_id, "j", 1, "w1", proc.now + 10_000, proc.now + 1))
    proc.advance(proc.now + 20_000)  # the lease lapses: attempt 2 is dispatched
    proc.outcome(RunSucceeded(run.run_id, "j", 1, "w1", proc.now + 1, "late"))
    _succeed_all(proc, worker="w2")
    answer = _replay(proc).why("j", T0 + MINUTE)
    assert [(a.attempt, a.trigger, a.outcome, a.workers) for a in answer.attempts] == [
        (1, "scheduled", "cancelled: lease_expired", ("w1",)),
        (2, "lease_expired", "succeeded", ("w2",)),
    ]
    stale = [link for link in answer.chain if "[stale or duplicate" in link.text]
    assert [link.text.split(" [")[0] for link in stale] == ["RunSucceeded attempt 1 by worker w1"]


def test_the_explanation_renders_and_serialises_with_citations() -> None:
    """Text lines cite topic[partition]@offset; JSON carries the same cites and the verdict."""
    proc = _proc()
    _create(proc, "j", _spec(OneTime(T0 + MINUTE)))
    proc.advance(T0 + MINUTE)
    _succeed_all(proc)
    answer = _replay(proc).why("j", T0 + MINUTE)
    text = answer.render()
    assert "verdict: FIRED (succeeded)" in text
    assert "tickwheel.runs[0]@0" in text
    data = answer.to_json()
    assert data["verdict"] == "fired"
    assert data["occurrence"]["run_id"] == answer.run_id
    cites = [link["cite"] for link in data["chain"] if link["cite"] is not None]
    assert {"topic": "tickwheel.runs", "partition": 0, "offset": 0,
            "timestamp": T0 + MINUTE} in [{k: c[k] for k in ("topic", "partition", "offset", "timestamp")}
                                          for c in cites]


def _is_due_for(record: LogRecord, scheduled_for: int) -> bool:
    if not record.topic.endswith(".runs") or record.value is None:
        return False
    event = mappers.from_bytes(record.value)
    return isinstance(event, RunDue) and event.scheduled_for_ms == scheduled_for


def test_asked_after_a_one_time_job_completed_the_answer_says_so() -> None:
    """Its only occurrence is explained, and the completion is named and cited."""
    proc = _proc()
    _create(proc, "j", _spec(OneTime(T0 + MINUTE)))
    proc.advance(T0 + MINUTE)
    _succeed_all(proc)
    answer = _replay(proc).why("j", T0 + 60 * MINUTE)
    assert (answer.verdict, answer.scheduled_for_ms) == (Verdict.FIRED, T0 + MINUTE)
    assert "the job completed at" in answer.summary
    assert any(link.text.startswith("JobChanged completed") for link in answer.chain)
