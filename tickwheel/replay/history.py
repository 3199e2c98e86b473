"""One job's log, put back in the order the processor lived it, and folded with ``core.evolve``.

The processor's state is, by construction (see ``streams/core.py``), the fold of ``evolve``
over the events ``decide`` emitted plus the worker outcomes it accepted. Replay folds the
same events with the same ``evolve``; what it has to rebuild is their *order*, because they
sit on three topics:

* ``runs[p]`` and ``job-events[p]``: the processor's own output. Every event of one
  processor step carries that step's clock (``at_ms``; ``emitted_at_ms`` on RunDue), and one
  step is one transaction, so events with the same ``at_ms`` on either topic form a
  :class:`Step`. Steps are merged by ``at_ms`` without ever reordering a topic's own
  offsets. Inside a step each topic's order is the emission order, and the two are
  interleaved runs-first, except where ``decide`` provably emitted a job event first:
  a job's JobAccepted before anything happens to it (create then trigger in one batch);
  ``JobChanged(buffered, o)`` before o is released or skipped; a trigger's RunDue right
  before its ``JobChanged(triggered)``; and every command's answer before the events only
  run timers emit (retry, lease, start deadline, timeout), because a step decides its
  inputs before its timers. Every other pair of events of one step commutes under
  ``evolve`` (the property tests drive random histories through the core to show it).
* ``outcomes[p]``: worker reports, timestamped by the worker. The processor decides a batch
  in record-timestamp order at a clock read after the batch arrived, so an outcome belongs
  before every step whose ``at_ms`` is at or after its timestamp. When the processor's own
  output proves an outcome was accepted earlier (its RunSettled, the retry it caused, the
  lease expiry of an attempt that had started), the outcome is moved up to that step: this
  absorbs a worker clock running ahead of the processor's.
* Outcomes are folded whole, stale ones included: ``evolve`` applies the same fencing as
  ``decide``, and replay asks ``decide`` itself whether each one was accepted.

The changelog (one state per job per step, in the same transaction) is the cross-check.
One race is inherent: a worker report written just before a step of its job but fetched
only by the next step is folded one step early, so for those milliseconds the fold is ahead
of the changelog record between them (a worker clock running behind or ahead shifts a
report likewise). :func:`matches` therefore accepts a changelog record that equals the fold
at *some* cut between the job's neighbouring records. Such a shift changes the folded state
for good only if the step it crosses touched the same attempt (a lease lapsing just as its
worker reports); that, a job deleted and re-created within one step, and clocks stepping
backwards between steps are the known limits, and each shows up as a changelog mismatch in
``verify``, never silently.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from tickwheel.replay.log import Entry, Role
from tickwheel.schemas.model import (
    JobAccepted,
    JobChanged,
    JobState,
    RunCancelled,
    RunDue,
    RunFailed,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunStatus,
    RunSucceeded,
    RunTimedOut,
    RunTrigger,
)
from tickwheel.streams.core import CoreConfig, Event, decide, evolve

_CFG = CoreConfig()  # decide's knobs do not change whether an outcome is accepted
_SETTLED_BY = {
    RunStatus.SUCCEEDED: RunSucceeded.__name__,
    RunStatus.FAILED: RunFailed.__name__,
    RunStatus.TIMED_OUT: RunTimedOut.__name__,
}


@dataclass(frozen=True, slots=True)
class Step:
    """One processor transaction's output for one job."""

    at_ms: int
    runs: tuple[Entry, ...]
    answers: tuple[Entry, ...]  # job-events

    def apply(self, state: JobState | None) -> Iterator[tuple[Entry, JobState | None]]:
        """Fold the step's events in emission order (module docstring), state after each."""
        answers, done = self.answers, 0
        for entry in self.runs:
            for answer in answers[done:_before(entry, answers, done, state)]:
                state = evolve(state, _event(answer))
                done += 1
                yield answer, state
            state = evolve(state, _event(entry))
            yield entry, state
        for answer in answers[done:]:
            state = evolve(state, _event(answer))
            yield answer, state


def _before(entry: Entry, answers: Sequence[Entry], done: int, state: JobState | None) -> int:
    """How many of ``answers`` must be folded before the runs event ``entry``: those the
    processor provably emitted before it (each rule names a fact of ``core.decide``)."""
    event = entry.event
    need = done
    for index in range(done, len(answers)):
        answer = answers[index].event
        if state is None and isinstance(answer, JobAccepted):
            return index + 1  # nothing happens to a job before it is created
        if isinstance(answer, JobChanged):
            if answer.change == "buffered" and _occurrence(event) == answer.reason:
                need = index + 1  # an occurrence is buffered before it is released or skipped
            elif answer.change == "triggered" and getattr(event, "run_id", None) == answer.reason:
                need = max(need, index)  # a trigger's RunDue comes right before its answer
        if _timer_only(event) and bool(getattr(answer, "command_id", "")):
            need = index + 1  # a step decides all its inputs before any timer
    return need


def _occurrence(event: object) -> str | None:
    if isinstance(event, RunDue) and event.trigger is RunTrigger.SCHEDULED:
        return str(event.scheduled_for_ms)
    if isinstance(event, RunSkipped):
        return str(event.scheduled_for_ms)
    return None


def _timer_only(event: object) -> bool:
    """Events only a run timer emits (retry, lease or start deadline, execution timeout)."""
    if isinstance(event, RunCancelled):
        return event.reason in ("timeout", "lease_expired", "start_timeout")
    return isinstance(event, RunDue) and event.trigger in (RunTrigger.RETRY, RunTrigger.LEASE_EXPIRED)


@dataclass(frozen=True, slots=True)
class Placed:
    """A step or an outcome at the time the fold files it under."""

    at_ms: int
    item: Step | Entry


@dataclass(frozen=True, slots=True)
class Applied:
    """One event as the fold applied it, and the job's state right after it."""

    entry: Entry
    at_ms: int
    accepted: bool  # outcomes: whether decide accepted it; processor events: always
    state: JobState | None


@dataclass(frozen=True, slots=True)
class JobHistory:
    """Everything the log says about one job, each topic in offset order, plus the fold order."""

    job_id: str
    commands: tuple[Entry, ...]
    runs: tuple[Entry, ...]
    outcomes: tuple[Entry, ...]
    answers: tuple[Entry, ...]
    changelog: tuple[Entry, ...]
    dead_letters: tuple[Entry, ...]
    order: tuple[Placed, ...]

    @classmethod
    def build(cls, job_id: str, entries: Iterable[Entry]) -> JobHistory:
        by_role: dict[Role, list[Entry]] = {role: [] for role in Role}
        for entry in entries:
            by_role[entry.role].append(entry)
        for found in by_role.values():
            found.sort(key=lambda e: (e.cite.partition, e.cite.offset))
        runs, answers = tuple(by_role[Role.RUNS]), tuple(by_role[Role.JOB_EVENTS])
        steps = _steps(runs, answers)
        outcomes = tuple(by_role[Role.OUTCOMES])
        return cls(
            job_id=job_id, commands=tuple(by_role[Role.COMMANDS]), runs=runs,
            outcomes=outcomes, answers=answers, changelog=tuple(by_role[Role.CHANGELOG]),
            dead_letters=tuple(by_role[Role.DLQ]), order=_merge(steps, outcomes),
        )

    def events(self) -> Iterator[Entry]:
        """Every entry of the job across topics, in no particular order."""
        for group in (self.commands, self.runs, self.outcomes, self.answers, self.changelog,
                      self.dead_letters):
            yield from group


def fold(history: JobHistory, until_ms: int | None = None) -> Iterator[Applied]:
    """Apply the job's events in fold order with ``core.evolve``, up to ``until_ms``."""
    state: JobState | None = None
    for placed in history.order:
        if until_ms is not None and placed.at_ms > until_ms:
            return
        if isinstance(placed.item, Step):
            for entry, after in placed.item.apply(state):
                state = after
                yield Applied(entry, placed.at_ms, True, state)
            continue
        outcome = _event(placed.item)
        accepted = state is not None and bool(decide(state, outcome, placed.at_ms, _CFG))  # type: ignore[arg-type]
        state = evolve(state, outcome)
        yield Applied(placed.item, placed.at_ms, accepted, state)


def state_at(history: JobHistory, at_ms: int) -> JobState | None:
    """The job's state as of ``at_ms``: the fold of every event filed at or before it."""
    state: JobState | None = None
    for applied in fold(history, until_ms=at_ms):
        state = applied.state
    return state


def matches(history: JobHistory, record: Entry) -> tuple[bool, JobState | None]:
    """Whether the changelog ``record`` equals the fold at some cut between the job's previous
    and next changelog records (module docstring), and the fold at the record's own
    timestamp (to show a difference)."""
    stored = record.event if isinstance(record.event, JobState) else None
    times = [e.cite.timestamp for e in history.changelog]
    since = max((t for e, t in zip(history.changelog, times, strict=True) if e.cite < record.cite),
                default=None)
    until = min((t for e, t in zip(history.changelog, times, strict=True) if record.cite < e.cite),
                default=None)
    state: JobState | None = None
    at_record: JobState | None = None
    cuts: list[JobState | None] = []
    for applied in fold(history, until_ms=None if until is None else until - 1):
        if applied.at_ms <= record.cite.timestamp:
            at_record = applied.state
        if since is None or applied.at_ms > since:
            cuts.append(state)
        state = applied.state
    cuts.append(state)
    return stored in cuts, at_record


def event_time(entry: Entry) -> int:
    """The processor step an output event belongs to (its clock), or a record's timestamp."""
    event = entry.event
    if isinstance(event, RunDue):
        return event.emitted_at_ms
    if entry.role in (Role.RUNS, Role.JOB_EVENTS):
        return int(getattr(event, "at_ms"))  # noqa: B009 - every run and job event has at_ms
    return entry.cite.timestamp


def _event(entry: Entry) -> Event:
    assert entry.event is not None  # steps and outcomes never hold tombstones
    return entry.event  # type: ignore[return-value]


def _steps(runs: Sequence[Entry], answers: Sequence[Entry]) -> list[Step]:
    """Group the two output topics by step clock, keeping each topic's offset order."""
    steps: list[Step] = []
    i = j = 0
    while i < len(runs) or j < len(answers):
        at = min(event_time(runs[i]) if i < len(runs) else _NEVER,
                 event_time(answers[j]) if j < len(answers) else _NEVER)
        start_i, start_j = i, j
        while i < len(runs) and event_time(runs[i]) == at:
            i += 1
        while j < len(answers) and event_time(answers[j]) == at:
            j += 1
        steps.append(Step(at, tuple(runs[start_i:i]), tuple(answers[start_j:j])))
    return steps


_NEVER = 2**63


def _merge(steps: Sequence[Step], outcomes: Sequence[Entry]) -> tuple[Placed, ...]:
    """Steps in order; each outcome before the first step at or after its (anchored) time."""
    placed = sorted(_anchored(outcomes, _evidence(steps)), key=lambda p: p.at_ms)
    merged: list[Placed] = []
    j = 0
    for step in steps:
        while j < len(placed) and placed[j].at_ms <= step.at_ms:
            merged.append(placed[j])
            j += 1
        merged.append(Placed(step.at_ms, step))
    merged.extend(placed[j:])
    return tuple(merged)


def _anchored(outcomes: Sequence[Entry], evidence: dict[tuple[str, str, int], int]) -> list[Placed]:
    """Each outcome at its timestamp, or earlier where the processor's output proves it."""
    seen: set[tuple[str, str, int]] = set()
    placed: list[Placed] = []
    for entry in outcomes:
        event = entry.event
        at = entry.cite.timestamp
        key = (type(event).__name__, str(getattr(event, "run_id", "")),
               int(getattr(event, "attempt", 0)))
        if key not in seen:  # only the first report of an attempt can be the accepted one
            seen.add(key)
            at = min(at, evidence.get(key, at))
        placed.append(Placed(at, entry))
    return placed


def _evidence(steps: Sequence[Step]) -> dict[tuple[str, str, int], int]:
    """``(outcome type, run id, attempt) -> at_ms`` of the first step that needed it accepted."""
    found: dict[tuple[str, str, int], int] = {}
    for step in steps:
        for entry in (*step.runs, *step.answers):
            for key in _proves(entry.event):
                found.setdefault(key, step.at_ms)
    return found


def _proves(event: object) -> list[tuple[str, str, int]]:
    if isinstance(event, RunSettled) and event.status in _SETTLED_BY:
        return [(_SETTLED_BY[event.status], event.run_id, event.attempts)]
    if isinstance(event, RunDue) and event.trigger is RunTrigger.RETRY:
        previous = event.attempt - 1
        return [(RunFailed.__name__, event.run_id, previous),
                (RunTimedOut.__name__, event.run_id, previous)]
    if isinstance(event, RunCancelled) and event.reason in ("lease_expired", "timeout"):
        return [(RunStarted.__name__, event.run_id, event.attempt)]
    return []
