"""The history checker: judges a recorded :class:`History` against invariants 1-6.

Modelled on Jepsen's Kafka checker (lost, duplicate, aborted read) and Kafka's transactions
system test (input = output, zero duplicates). :func:`check` returns a :class:`CheckResult`
whose violation counts a test asserts are all zero (:meth:`CheckResult.problems`):

``lost``
    an occurrence due while its job was live that the log neither dispatched nor explained
    (RunDue, RunSkipped or buffered): one-time jobs judged here from their accepted spec,
    every job also by ``replay verify`` (``lost_occurrence``); and acknowledged commands
    the processor never answered (``lost_commands``).
``unexpected``
    a RunDue the inputs do not explain: a scheduled run id that is not ``run_id_for`` an
    occurrence of an accepted spec, a manual run no TriggerJob asked for, a retry of a run
    never dispatched.
``duplicates``
    a (run id, attempt) dispatched more than once in ``runs`` read_committed (invariant 2).
``aborted_reads``
    a record a read_committed reader saw during the scenario that the final committed log
    does not hold at that position (with those bytes).
``double_effects``
    a run whose effect the idempotent target applied more than once (invariant 3); and
    ``missing_effects``, a run settled SUCCEEDED whose http effect never arrived.
``starts_after_cancel``
    a run of a job that executed after the job's cancel (or delete) acknowledgement was
    visible to read_committed readers (invariant 4): a target call of an attempt not leased
    before then, or a RunStarted written after it by an attempt that then ran (a target call,
    or an outcome other than its own cancellation). A worker whose cancel check (step 3)
    preceded the ack may still write its lease after it; its second check (step 5b) then
    stops it before the executor is called, and that lease alone is no start.
    ``replay verify`` counts starts after the ack's *produce* time instead, which includes
    legitimate starts while the ack's transaction was still open; that count is info.
``non_terminal``
    a dispatched run with no RunSettled at the end (only for scenarios with workers).
``projection_mismatches``
    a job whose status/version in a running projection differs from a fresh fold of the log.
``state_mismatches``
    a job whose recovered RocksDB state differs from its latest changelog record, and
    ``replay verify``'s ``state_differs`` (changelog vs fold of the log; invariant 6).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.recorder import CommandOutcome, History, Seen
from tickwheel.projections.fold import Position
from tickwheel.projections.kv import MemoryKV
from tickwheel.projections.readmodel import PROJECTED_TOPICS, Projector, RawRecord, ReadModel
from tickwheel.replay import Invariant, Replayer, Source
from tickwheel.replay.history import state_at
from tickwheel.replay.log import LogRecord
from tickwheel.replay.verify import diff_states
from tickwheel.schemas import mappers
from tickwheel.schemas.codec import CodecError
from tickwheel.schemas.model import (
    CronSchedule,
    JobAccepted,
    JobChanged,
    JobRejected,
    JobState,
    JobStatus,
    OneTime,
    RunDue,
    RunFailed,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunStatus,
    RunSucceeded,
    RunTimedOut,
    RunTrigger,
    TriggerJob,
    manual_run_id_for,
    run_id_for,
)
from tickwheel.streams.schedule import ScheduleError, next_occurrence, offset_ms

GRACE_MS = 30_000  # an occurrence due this close to the end of the scenario is not judged yet
_STOPPED = (JobStatus.CANCELLED, JobStatus.DELETED)
# Replay invariants counted in their own columns (the rest stay under replay_violations).
_REPLAY_COLUMNS = {Invariant.LOST_OCCURRENCE, Invariant.DUPLICATE_RUN_DUE, Invariant.STATE_DIFFERS}


@dataclass(frozen=True)
class CheckResult:
    """What the checker found in one scenario; every violation field must be empty."""

    runs: int  # distinct run ids dispatched
    dispatches: int  # RunDue records (attempts) committed
    lost: tuple[str, ...]
    lost_commands: tuple[str, ...]
    unexpected: tuple[str, ...]
    duplicates: Mapping[tuple[str, int], int]
    aborted_reads: tuple[str, ...]
    double_effects: Mapping[str, int]
    missing_effects: tuple[str, ...]
    starts_after_cancel: tuple[str, ...]
    non_terminal: tuple[str, ...]
    projection_mismatches: tuple[str, ...]
    state_mismatches: tuple[str, ...]
    replay_violations: tuple[str, ...]
    info: Mapping[str, int] = field(default_factory=dict)

    _VIOLATIONS = (
        "lost", "lost_commands", "unexpected", "duplicates", "aborted_reads", "double_effects",
        "missing_effects", "starts_after_cancel", "non_terminal", "projection_mismatches",
        "state_mismatches", "replay_violations",
    )

    def problems(self) -> dict[str, int]:
        """Violation counts that are not zero (a clean scenario returns ``{}``)."""
        counts = {name: len(getattr(self, name)) for name in self._VIOLATIONS}
        return {name: n for name, n in counts.items() if n}

    def row(self) -> dict[str, int]:
        """The figures of the large-run table."""
        return {
            "runs": self.runs,
            "lost": len(self.lost) + len(self.lost_commands),
            "duplicate": len(self.duplicates),
            "double_effects": len(self.double_effects),
            "starts_after_cancel": len(self.starts_after_cancel),
        }

    def explain(self, limit: int = 5) -> str:
        """The first few examples of each violation, for an assertion message."""
        lines = [f"info: {dict(self.info)}"]
        for name, count in self.problems().items():
            examples = list(getattr(self, name))[:limit]
            lines.append(f"{name}: {count}, e.g. {examples}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Log:
    """The final log decoded once, per topic, in offset order."""

    runs: list[tuple[LogRecord, Any]]
    answers: list[tuple[LogRecord, Any]]
    outcomes: list[tuple[LogRecord, Any]]
    commands: list[Any]
    changelog: dict[str, bytes | None]

    @classmethod
    def decode(cls, history: History) -> _Log:
        changelog: dict[str, bytes | None] = {}
        for r in history.records("sched-changelog"):
            if r.key is not None:
                changelog[r.key.decode()] = r.value
        return cls(
            runs=_decoded(history.records("runs"), mappers.run_event_from_bytes),
            answers=_decoded(history.records("job-events"), mappers.job_event_from_bytes),
            outcomes=_decoded(history.records("outcomes"), mappers.outcome_from_bytes),
            commands=[e for _, e in _decoded(history.records("commands"), mappers.command_from_bytes)],
            changelog=changelog,
        )

    def events(self, kind: type) -> list[Any]:
        return [e for _, e in (*self.runs, *self.answers) if isinstance(e, kind)]


def _decoded(records: Iterable[LogRecord], decode: Any) -> list[tuple[LogRecord, Any]]:
    found = []
    for record in records:
        if record.value is None:
            continue
        try:
            found.append((record, decode(record.value)))
        except CodecError:
            continue  # the processor dead-letters these; replay verify reports them
    return found


def check(
    history: History,
    *,
    settle: bool = False,
    replay: bool = True,
    replay_state_at_record_times: bool = True,
    stores: Mapping[str, JobState | None] | None = None,
) -> CheckResult:
    """Judge ``history``. ``settle``: every run must be settled by the end (workers ran).

    ``stores``: the processors' recovered RocksDB states (job id -> state) to compare with
    the changelog; ``replay``: also run ``replay verify`` over the whole log. Replay compares
    each changelog record with the fold *as of the record's Kafka timestamp*, which assumes
    the processor's clock is the clock that stamped its records; a scenario that injects a
    clock into the processor alone sets ``replay_state_at_record_times=False`` and keeps the
    timestamp-free comparison of the final changelog with the fold of the whole log.
    """
    log = _Log.decode(history)
    dues = log.events(RunDue)
    judged_until = history.finished_ms - GRACE_MS
    replayed = replay_violations(history) if replay else {}
    if not replay_state_at_record_times:
        replayed.pop(Invariant.STATE_DIFFERS, None)
    # Replay dates a cancel ack by its record's timestamp, taken when the processor produced
    # it inside its transaction; clients see it only at the commit, and a worker that read
    # the LSO before the commit starts legitimately. ``starts_after_cancel`` judges invariant 4
    # against the time the ack became readable; replay's stricter count is kept as info.
    early_acks = replayed.pop(Invariant.STARTED_AFTER_CANCEL, ())
    return CheckResult(
        runs=len({d.run_id for d in dues}),
        dispatches=len(dues),
        lost=(*lost_one_time(log, judged_until), *replayed.get(Invariant.LOST_OCCURRENCE, ())),
        lost_commands=lost_commands(history, log),
        unexpected=unexpected_runs(log),
        duplicates=duplicate_dispatches(dues),
        aborted_reads=aborted_reads(history.concurrent, history.log),
        double_effects=double_effects(history),
        missing_effects=missing_effects(history, log),
        starts_after_cancel=starts_after_cancel(history, log),
        non_terminal=non_terminal(log) if settle else (),
        projection_mismatches=projection_mismatches(history),
        state_mismatches=(
            *store_mismatches(stores, log.changelog),
            *final_fold_mismatches(history),
            *replayed.get(Invariant.STATE_DIFFERS, ()),
        ),
        replay_violations=tuple(
            text for kind, texts in replayed.items() if kind not in _REPLAY_COLUMNS for text in texts
        ),
        info={**_info(history, log), "replay_starts_within_ack_transaction": len(early_acks)},
    )


def _info(history: History, log: _Log) -> dict[str, int]:
    outcomes = Counter(c.outcome.value for c in history.commands)
    committed = {(r.partition, r.offset) for r in history.records("runs")}
    aborted = sum(1 for r in history.uncommitted_runs if (r.partition, r.offset) not in committed)
    keys = Counter(c.run_id for c in history.target_calls)
    return {
        "commands_ok": outcomes.get(CommandOutcome.OK.value, 0),
        "commands_failed": outcomes.get(CommandOutcome.FAILED.value, 0),
        "commands_unknown": outcomes.get(CommandOutcome.UNKNOWN.value, 0),
        "aborted_writes": aborted,
        "leases": sum(1 for _, e in log.outcomes if isinstance(e, RunStarted)),
        "settled": len(log.events(RunSettled)),
        "target_calls": len(history.target_calls),
        "target_repeat_calls": sum(n - 1 for n in keys.values() if n > 1),
    }


# -- lost ------------------------------------------------------------------------------------


def lost_one_time(log: _Log, judged_until: int) -> tuple[str, ...]:
    """One-time occurrences of accepted specs never decided, unless the job stopped first."""
    decided = _decided(log)
    stopped = _stop_times(log)
    lost: list[str] = []
    for accepted in log.events(JobAccepted):
        schedule = accepted.spec.schedule
        if not isinstance(schedule, OneTime):
            continue
        due = max(accepted.at_ms, schedule.at_ms + _offset(accepted, schedule.at_ms))
        run_id = run_id_for(accepted.job_id, schedule.at_ms)
        if run_id in decided or due > judged_until or _superseded(log, accepted, due, stopped):
            continue
        lost.append(f"{accepted.job_id}@{schedule.at_ms} ({run_id})")
    return tuple(sorted(set(lost)))


def _offset(accepted: JobAccepted, at_ms: int) -> int:
    return offset_ms(accepted.job_id, at_ms, accepted.spec.spread_ms, accepted.spec.jitter_ms)


def _decided(log: _Log) -> set[str]:
    decided = {e.run_id for _, e in log.runs if isinstance(e, RunSkipped)}
    decided |= {e.run_id for _, e in log.runs if isinstance(e, RunDue) and e.trigger is RunTrigger.SCHEDULED}
    for _, event in log.answers:
        if isinstance(event, JobChanged) and event.change == "buffered" and event.reason.isdigit():
            decided.add(run_id_for(event.job_id, int(event.reason)))
    return decided


def _stop_times(log: _Log) -> dict[str, int]:
    stops: dict[str, int] = {}
    for event in log.events(JobChanged):
        if event.status in _STOPPED:
            stops.setdefault(event.job_id, event.at_ms)
    return stops


def _superseded(log: _Log, accepted: JobAccepted, due: int, stopped: Mapping[str, int]) -> bool:
    """The job stopped, or took a newer spec, before this occurrence was due."""
    if stopped.get(accepted.job_id, due + 1) <= due:
        return True
    return any(
        a.job_id == accepted.job_id and a.version > accepted.version and a.at_ms <= due
        for a in log.events(JobAccepted)
    )


def lost_commands(history: History, log: _Log) -> tuple[str, ...]:
    """Commands the client saw acknowledged that the processor never answered."""
    answered = {
        e.command_id for _, e in log.answers if isinstance(e, JobAccepted | JobChanged | JobRejected)
    }
    return tuple(
        sorted(
            {
                c.command.meta.command_id
                for c in history.commands
                if c.outcome is CommandOutcome.OK and c.command.meta.command_id not in answered
            }
        )
    )


# -- unexpected, duplicates --------------------------------------------------------------------


def unexpected_runs(log: _Log) -> tuple[str, ...]:
    """RunDue records that no accepted spec, trigger or earlier attempt explains."""
    specs: dict[str, list[JobAccepted]] = defaultdict(list)
    for accepted in log.events(JobAccepted):
        specs[accepted.job_id].append(accepted)
    manual = {manual_run_id_for(c.meta.command_id) for c in log.commands if isinstance(c, TriggerJob)}
    first_attempts: set[str] = set()
    found: list[str] = []
    for due in log.events(RunDue):
        if due.trigger in (RunTrigger.RETRY, RunTrigger.LEASE_EXPIRED):
            ok = due.run_id in first_attempts
        elif due.trigger is RunTrigger.MANUAL:
            ok = due.run_id in manual
        else:
            ok = due.run_id == run_id_for(due.job_id, due.scheduled_for_ms) and any(
                _is_occurrence(a, due.scheduled_for_ms) for a in specs[due.job_id]
            )
        first_attempts.add(due.run_id)
        if not ok:
            what = f"{due.trigger.value} {due.job_id}@{due.scheduled_for_ms}"
            found.append(f"{due.run_id}#{due.attempt} ({what})")
    return tuple(found)


def _is_occurrence(accepted: JobAccepted, at_ms: int) -> bool:
    schedule = accepted.spec.schedule
    if isinstance(schedule, OneTime):
        return schedule.at_ms == at_ms
    assert isinstance(schedule, CronSchedule)
    for before in (1, 1_000):  # as core._occurrence_at: 1 s before avoids a DST-edge miss
        try:
            occurrence = next_occurrence(schedule, at_ms - before)
        except ScheduleError:
            return False
        if occurrence is not None and occurrence.at_ms == at_ms:
            return True
    return False


def duplicate_dispatches(dues: Iterable[RunDue]) -> dict[tuple[str, int], int]:
    counts = Counter((d.run_id, d.attempt) for d in dues)
    return {key: n for key, n in counts.items() if n > 1}


# -- aborted reads -----------------------------------------------------------------------------


def aborted_reads(concurrent: Iterable[Seen], final: Iterable[LogRecord]) -> tuple[str, ...]:
    """Records read_committed readers saw that the final committed log does not hold."""
    committed = {(r.topic, r.partition, r.offset): r.value for r in final}
    return tuple(
        f"{s.topic}[{s.partition}]@{s.offset}"
        for s in concurrent
        if committed.get((s.topic, s.partition, s.offset), b"\x00missing") != s.value
    )


# -- effects at the target ---------------------------------------------------------------------


def double_effects(history: History) -> dict[str, int]:
    """Runs whose effect the target applied more than once (a key per attempt would do it)."""
    effects: Counter[str] = Counter()
    for call in history.target_calls:
        keyless_success = call.idempotency_key is None and call.status is not None and call.status < 300
        if call.applied or keyless_success:
            effects[call.run_id or "?"] += 1
    return {run_id: n for run_id, n in effects.items() if n > 1}


def missing_effects(history: History, log: _Log) -> tuple[str, ...]:
    """Runs settled SUCCEEDED by an http executor whose effect never reached the target."""
    if not history.target_calls:
        return ()
    http_runs = {d.run_id for d in log.events(RunDue) if d.executor.kind == "http"}
    applied = {c.run_id for c in history.target_calls if c.applied}
    return tuple(
        sorted(
            s.run_id
            for s in log.events(RunSettled)
            if s.status is RunStatus.SUCCEEDED and s.run_id in http_runs and s.run_id not in applied
        )
    )


# -- starts after cancel -------------------------------------------------------------------------


def starts_after_cancel(history: History, log: _Log) -> tuple[str, ...]:
    """Leases written, or target calls arriving, after the job's stop ack was readable."""
    acks = _ack_times(history, log)
    job_of = {d.run_id: d.job_id for d in log.events(RunDue)}
    ran = {(c.run_id, c.attempt) for c in history.target_calls}
    ran |= {(e.run_id, e.attempt) for _, e in log.outcomes if _ran(e)}
    found: set[str] = set()
    for record, event in log.outcomes:
        late = isinstance(event, RunStarted) and record.timestamp > acks.get(event.job_id, 2**62)
        if late and (event.run_id, event.attempt) in ran:
            found.add(f"{event.run_id}#{event.attempt} lease at {record.timestamp}")
    leased = {(e.run_id, e.attempt): r.timestamp for r, e in log.outcomes if isinstance(e, RunStarted)}
    for call in history.target_calls:
        job_id = job_of.get(call.run_id or "")
        ack = acks.get(job_id or "", 2**62)
        # A call of an attempt leased before the ack belongs to a run that started in time.
        lease_ms = leased.get((call.run_id or "", call.attempt or 0), ack + 1)
        if job_id is not None and call.at_ms > ack and lease_ms > ack:
            found.add(f"{call.run_id}#{call.attempt} call at {call.at_ms} without an earlier lease")
    return tuple(sorted(found))


def _ran(event: object) -> bool:
    """An outcome only an attempt whose executor was called reports."""
    if isinstance(event, RunSucceeded | RunTimedOut):
        return True
    return isinstance(event, RunFailed) and event.error_class != "Cancelled"


def _ack_times(history: History, log: _Log) -> dict[str, int]:
    """Per stopped job: when its stop ack became visible (first seen by the tail, else written)."""
    seen = {(s.topic, s.partition, s.offset): s.observed_ms for s in history.concurrent}
    acks: dict[str, int] = {}
    for record, event in log.answers:
        if isinstance(event, JobChanged) and event.status in _STOPPED and event.command_id:
            at = seen.get((record.topic, record.partition, record.offset), record.timestamp)
            acks[event.job_id] = min(acks.get(event.job_id, at), at)
    return acks


# -- settlement, projections, stores ---------------------------------------------------------------


def non_terminal(log: _Log) -> tuple[str, ...]:
    settled = {s.run_id for s in log.events(RunSettled)}
    return tuple(sorted({d.run_id for d in log.events(RunDue)} - settled))


def projection_mismatches(history: History) -> tuple[str, ...]:
    """Jobs whose status in the running projection differs from a fresh fold of the log."""
    if history.projection is None:
        return ()
    folded = folded_projection(history)
    return tuple(
        f"{job_id}: projection={history.projection.get(job_id)} fold={status}"
        for job_id, status in sorted(folded.items())
        if history.projection.get(job_id) != status
    )


def folded_projection(history: History) -> dict[str, str]:
    """Job id -> ``status/vN`` from the projections' own fold of the final log, from scratch."""
    kv = MemoryKV()
    projector = Projector(kv)
    records = [
        RawRecord(Position(topic, r.partition, r.offset), r.value)
        for topic in PROJECTED_TOPICS
        for r in history.records(topic)
    ]
    projector.apply(records)
    model = ReadModel(kv)
    jobs = {e.job_id for _, e in _decoded(history.records("job-events"), mappers.job_event_from_bytes)}
    found: dict[str, str] = {}
    for job_id in jobs:
        view = model.job(job_id)
        if view is not None:
            found[job_id] = f"{view.status}/v{view.version}"
    return found


def store_mismatches(
    stores: Mapping[str, JobState | None] | None, changelog: Mapping[str, bytes | None]
) -> tuple[str, ...]:
    """Jobs whose recovered RocksDB state is not their latest committed changelog state."""
    if stores is None:
        return ()
    found: list[str] = []
    for job_id in sorted(set(stores) | set(changelog)):
        raw = changelog.get(job_id)
        expected = None if raw is None else mappers.state_from_bytes(raw)
        if stores.get(job_id) != expected:
            found.append(f"{job_id}: store={_brief(stores.get(job_id))} changelog={_brief(expected)}")
    return tuple(found)


def _brief(state: JobState | None) -> str:
    if state is None:
        return "absent"
    return f"{state.status.value} v{state.version} runs={[(r.run_id[:10], r.attempt) for r in state.runs]}"


def final_fold_mismatches(history: History) -> tuple[str, ...]:
    """Jobs whose final changelog state is not the fold of their whole log (no clock involved)."""
    result = Replayer(Source(prefix=history.prefix)).replay(history.log)
    found: list[str] = []
    for job_id, job in result.histories.items():
        if not job.changelog:
            continue
        last = job.changelog[-1].event
        stored = last if isinstance(last, JobState) else None
        differences = diff_states(state_at(job, 2**62), stored)
        if differences:
            found.append(f"{job_id}: final changelog != fold(log): " + "; ".join(differences))
    return tuple(found)


# -- replay verify -----------------------------------------------------------------------------------


def replay_violations(history: History) -> dict[Invariant, tuple[str, ...]]:
    """``replay verify`` over the whole log (the library the ``tickwheel replay`` CLI uses)."""
    result = Replayer(Source(prefix=history.prefix, grace_ms=GRACE_MS)).replay(history.log)
    if result.start_ms is None:
        return {}
    report = result.verify(result.start_ms, history.finished_ms)
    found: dict[Invariant, list[str]] = defaultdict(list)
    for violation in report.violations:
        found[violation.invariant].append(f"{violation.job_id}: {violation.message}")
    return {kind: tuple(texts) for kind, texts in found.items()}
