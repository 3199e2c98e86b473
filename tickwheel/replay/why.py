"""``why JOB --at T``: what happened to the job's occurrence nearest T, and the chain of events.

The candidate occurrences are the ones the log decided (RunDue, RunSkipped, buffered) plus
the ones the job's spec implies around T, computed with ``schedule.py`` exactly as the
processor computes them (DST rules included). The nearest to T (earlier on a tie) is
explained from the log: the spec that governed it, the lifecycle change in force, the
dispatch and each attempt with its worker and outcome (stale reports marked, as ``decide``
judges them on the folded state), the settlement, or, when the log holds no decision, why
none was due (not yet created, cancelled or deleted before it) or that it is pending or lost;
asked after a one-time job completed, the answer says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tickwheel.replay.describe import describe, describe_dst
from tickwheel.replay.history import Applied, JobHistory, event_time, fold
from tickwheel.replay.log import Cite, Entry, Role, role_of
from tickwheel.replay.times import iso
from tickwheel.schemas.model import (
    CronSchedule,
    DeadLetter,
    JobAccepted,
    JobChanged,
    JobSpec,
    JobStatus,
    RunCancelled,
    RunDue,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStatus,
    RunTrigger,
    Schedule,
    SkipReason,
    run_id_for,
)
from tickwheel.streams.schedule import Occurrence, ScheduleError, next_occurrence, offset_ms

_LOOKBACK_MS = (1_000, 60_000, 3_600_000, 86_400_000, 32 * 86_400_000, 366 * 86_400_000,
                5 * 366 * 86_400_000)
_STOPPED = (JobStatus.CANCELLED, JobStatus.DELETED)
_ROLE_RANK = {role: rank for rank, role in enumerate(
    (Role.COMMANDS, Role.OUTCOMES, Role.RUNS, Role.JOB_EVENTS, Role.DLQ, Role.CHANGELOG))}


class Verdict(StrEnum):
    FIRED = "fired"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"
    BUFFERED = "buffered"  # held by the overlap policy, not yet dispatched
    PENDING = "pending"  # not due, or not decided yet, by the end of the log
    NEVER_DUE = "never_due"
    LOST = "lost"  # due while the job was live, neither dispatched nor skipped


@dataclass(frozen=True, slots=True)
class Link:
    """One step of a decision chain; ``cite`` is None for what replay computed itself."""

    at_ms: int
    text: str
    cite: Cite | None = None


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    trigger: str
    dispatched: Cite
    not_before_ms: int
    workers: tuple[str, ...]
    heartbeats: int
    outcome: str


@dataclass(frozen=True, slots=True)
class Explanation:
    job_id: str
    at_ms: int
    verdict: Verdict
    reason: str
    summary: str
    scheduled_for_ms: int | None
    run_id: str | None
    local_time: str | None
    attempts: tuple[Attempt, ...]
    chain: tuple[Link, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "at_ms": self.at_ms, "at": iso(self.at_ms),
            "verdict": self.verdict.value, "reason": self.reason, "summary": self.summary,
            "occurrence": None if self.scheduled_for_ms is None else {
                "scheduled_for_ms": self.scheduled_for_ms, "scheduled_for": iso(self.scheduled_for_ms),
                "local": self.local_time, "run_id": self.run_id,
            },
            "attempts": [
                {"attempt": a.attempt, "trigger": a.trigger, "dispatched": a.dispatched.to_json(),
                 "not_before_ms": a.not_before_ms, "workers": list(a.workers),
                 "heartbeats": a.heartbeats, "outcome": a.outcome}
                for a in self.attempts
            ],
            "chain": [{"at_ms": link.at_ms, "at": iso(link.at_ms), "text": link.text,
                       "cite": None if link.cite is None else link.cite.to_json()}
                      for link in self.chain],
        }

    def render(self) -> str:
        lines = [f"why {self.job_id} at {iso(self.at_ms)}"]
        if self.scheduled_for_ms is not None:
            lines.append(f"occurrence: {iso(self.scheduled_for_ms)} (local {self.local_time}), "
                         f"run {self.run_id}")
        lines.append(f"verdict: {self.verdict.value.upper()} ({self.reason}): {self.summary}")
        lines.append("decision chain:")
        for link in self.chain:
            where = str(link.cite) if link.cite is not None else "(computed)"
            lines.append(f"  {iso(link.at_ms):<29} {where:<34} {link.text}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class _Candidate:
    scheduled_for_ms: int
    run_id: str
    from_log: bool


@dataclass(frozen=True, slots=True)
class _Job:
    history: JobHistory
    accepted: dict[Cite, bool]
    end_ms: int
    grace_ms: int

    @property
    def job_id(self) -> str:
        return self.history.job_id


def explain(history: JobHistory, at_ms: int, *, end_ms: int, grace_ms: int) -> Explanation:
    """The story of the occurrence of ``history``'s job nearest ``at_ms`` (module docstring)."""
    applied: list[Applied] = list(fold(history))
    job = _Job(history, {a.entry.cite: a.accepted for a in applied}, end_ms, grace_ms)
    candidates = [*_logged(history), *_computed(job, at_ms)]
    if not candidates:
        return _nothing_near(job, at_ms)
    nearest = min(candidates, key=lambda c: (abs(c.scheduled_for_ms - at_ms), c.scheduled_for_ms,
                                             not c.from_log))
    return _story(job, at_ms, nearest)


# -- candidates --------------------------------------------------------------------------


def _logged(history: JobHistory) -> list[_Candidate]:
    found: list[_Candidate] = []
    for entry in history.runs:
        event = entry.event
        if isinstance(event, RunDue | RunSkipped):
            found.append(_Candidate(event.scheduled_for_ms, event.run_id, True))
    for entry in _buffered(history):
        scheduled_for = int(entry.event.reason)  # type: ignore[union-attr]
        found.append(_Candidate(scheduled_for, run_id_for(history.job_id, scheduled_for), True))
    return found


def _computed(job: _Job, at_ms: int) -> list[_Candidate]:
    accepted = _spec_entry(job.history, at_ms)
    if accepted is None:
        return []
    schedule = _spec(accepted).schedule
    around = [_previous(schedule, at_ms), _next(schedule, at_ms)]
    return [_Candidate(o.at_ms, run_id_for(job.job_id, o.at_ms), False)
            for o in around if o is not None]


def _previous(schedule: Schedule, at_ms: int) -> Occurrence | None:
    """The last occurrence at or before ``at_ms``, looking back ever further (bounded)."""
    for span in _LOOKBACK_MS:
        found: Occurrence | None = None
        cursor = at_ms - span
        while (occurrence := _next(schedule, cursor)) is not None and occurrence.at_ms <= at_ms:
            found, cursor = occurrence, occurrence.at_ms
        if found is not None:
            return found
    return None


def _next(schedule: Schedule, after_ms: int) -> Occurrence | None:
    try:
        return next_occurrence(schedule, after_ms)
    except ScheduleError:
        return None


def occurrence_at(schedule: Schedule, scheduled_for: int) -> Occurrence | None:
    """The schedule's occurrence at exactly ``scheduled_for`` (for its local time and DST flags)."""
    # Asked from 1 s before as well as 1 ms: see core._occurrence_at on DST transitions.
    for before in (1, 1_000):
        occurrence = _next(schedule, scheduled_for - before)
        if occurrence is not None and occurrence.at_ms == scheduled_for:
            return occurrence
    return None


# -- the story ---------------------------------------------------------------------------


def _story(job: _Job, at_ms: int, candidate: _Candidate) -> Explanation:
    history, run_id, scheduled_for = job.history, candidate.run_id, candidate.scheduled_for_ms
    dues = [e for e in history.runs if isinstance(e.event, RunDue) and e.event.run_id == run_id]
    skips = [e for e in history.runs
             if isinstance(e.event, RunSkipped) and e.event.run_id == run_id]
    held = [e for e in _buffered(history) if int(e.event.reason) == scheduled_for]  # type: ignore[union-attr]
    decided = [event_time(e) for e in (*dues, *skips, *held)]
    reference = min(decided) if decided else scheduled_for
    accepted = _spec_entry(history, reference)
    manual = any(e.event.trigger is RunTrigger.MANUAL for e in dues)  # type: ignore[union-attr]
    links = _context(job, accepted, reference, None if manual else scheduled_for)
    links += [_link(job, e) for e in (*held, *skips)]
    attempts = _attempts(job, dues)
    links += _run_links(job, run_id, dues)
    verdict, reason, summary = _verdict(job, candidate, dues=dues, skips=skips, held=held,
                                        attempts=attempts)
    if verdict is Verdict.CANCELLED:
        links += _stop_links(job)
    completed = _completed_by(history, at_ms)
    if completed is not None and scheduled_for <= event_time(completed):
        # Asked about a time after a one-time job finished: its last occurrence is the story.
        summary += f"; the job completed at {iso(event_time(completed))}, nothing was due after"
        links += _answer_links(job, completed)
    chain = tuple(sorted(dict.fromkeys(links), key=_chain_order))
    return Explanation(
        job_id=job.job_id, at_ms=at_ms, verdict=verdict, reason=reason, summary=summary,
        scheduled_for_ms=scheduled_for, run_id=run_id,
        local_time=_local(accepted, scheduled_for), attempts=attempts, chain=chain,
    )


def _chain_order(link: Link) -> tuple[int, int, int, int]:
    """Time order. At one instant: what replay computed, then inputs, then the processor's
    runs events before its answers (the order ``decide`` emits them), each topic by offset;
    equal keys keep the order they were gathered in (a stable sort)."""
    if link.cite is None:
        return (link.at_ms, 0, 0, 0)
    rank = _ROLE_RANK.get(role_of(link.cite.topic), len(_ROLE_RANK))  # type: ignore[arg-type]
    return (link.at_ms, 1 + rank, link.cite.partition, link.cite.offset)


def _context(
    job: _Job, accepted: Entry | None, reference: int, scheduled_for: int | None
) -> list[Link]:
    """The spec in force (with its command), the lifecycle state, the schedule's reasoning
    (none for a manual run, which the schedule did not make)."""
    if accepted is None:
        return []
    links = [*_answer_links(job, accepted)]
    lifecycle = [e for e in job.history.answers
                 if isinstance(e.event, JobChanged) and e.event.change not in ("buffered", "triggered")
                 and event_time(e) <= reference and event_time(e) >= event_time(accepted)]
    if lifecycle:
        links += _answer_links(job, lifecycle[-1])
    if scheduled_for is None:
        return links
    spec = _spec(accepted)
    links.append(Link(scheduled_for, _schedule_text(job.job_id, spec, scheduled_for)))
    occurrence = occurrence_at(spec.schedule, scheduled_for)
    if occurrence is not None and isinstance(spec.schedule, CronSchedule):
        dst = describe_dst(occurrence, spec.schedule.tz)
        if dst is not None:
            links.append(Link(scheduled_for, f"DST rule: {dst}"))
    return links


def _schedule_text(job_id: str, spec: JobSpec, scheduled_for: int) -> str:
    delay = offset_ms(job_id, scheduled_for, spec.spread_ms, spec.jitter_ms)
    text = f"schedule: occurrence at {iso(scheduled_for)} (local {_local_of(spec, scheduled_for)})"
    if delay:
        text += f", due {iso(scheduled_for + delay)} after a spread/jitter of {delay} ms"
    return text


def _attempts(job: _Job, dues: Sequence[Entry]) -> tuple[Attempt, ...]:
    history = job.history
    attempts: list[Attempt] = []
    for entry in dues:
        due = entry.event
        assert isinstance(due, RunDue)
        reports = [e for e in history.outcomes if getattr(e.event, "run_id", None) == due.run_id
                   and getattr(e.event, "attempt", None) == due.attempt]
        workers = tuple(dict.fromkeys(str(getattr(e.event, "worker_id", "")) for e in reports
                                      if job.accepted.get(e.cite, False)))
        beats = sum(1 for e in reports if isinstance(e.event, RunHeartbeat))
        attempts.append(Attempt(due.attempt, due.trigger.value, entry.cite, due.not_before_ms,
                                workers, beats, _attempt_outcome(job, due, reports)))
    return tuple(attempts)


def _attempt_outcome(job: _Job, due: RunDue, reports: Sequence[Entry]) -> str:
    """How the attempt ended: the accepted terminal report, a processor cancel, or in flight."""
    for entry in reports:
        if job.accepted.get(entry.cite, False) and type(entry.event).__name__ in (
                "RunSucceeded", "RunFailed", "RunTimedOut"):
            return type(entry.event).__name__.removeprefix("Run").lower()
    for entry in job.history.runs:
        event = entry.event
        if isinstance(event, RunCancelled) and event.run_id == due.run_id \
                and event.attempt == due.attempt:
            return f"cancelled: {event.reason}"
    for entry in job.history.answers:
        event = entry.event
        if isinstance(event, RunSettled) and event.run_id == due.run_id \
                and event.attempts == due.attempt:
            return event.status.value
    return "in_flight"


def _run_links(job: _Job, run_id: str, dues: Sequence[Entry]) -> list[Link]:
    """The dispatches, worker reports (heartbeats left out), cancels, settlement, dead letter."""
    if not dues:
        return []
    history = job.history
    mine: list[Entry] = [*dues]
    mine += [e for e in history.outcomes if getattr(e.event, "run_id", None) == run_id
             and not isinstance(e.event, RunHeartbeat)]
    mine += [e for e in history.runs if isinstance(e.event, RunCancelled) and e.event.run_id == run_id]
    mine += [e for e in history.answers if isinstance(e.event, RunSettled) and e.event.run_id == run_id]
    mine += [e for e in history.dead_letters
             if isinstance(e.event, DeadLetter) and f"run {run_id} " in e.event.reason]
    links = [_link(job, e) for e in mine]
    manual = [e for e in history.answers if isinstance(e.event, JobChanged)
              and e.event.change == "triggered" and e.event.reason == run_id]
    for entry in manual:
        links += _answer_links(job, entry)
    return links


def _verdict(
    job: _Job, candidate: _Candidate, *, dues: Sequence[Entry], skips: Sequence[Entry],
    held: Sequence[Entry], attempts: Sequence[Attempt],
) -> tuple[Verdict, str, str]:
    if dues:
        return _fired(job, candidate.run_id, attempts)
    if skips:
        skip = skips[0].event
        assert isinstance(skip, RunSkipped)
        verdict = Verdict.CANCELLED if skip.reason is SkipReason.CANCELLED else Verdict.SKIPPED
        return verdict, skip.reason.value, f"not run: skipped ({skip.reason.value}): {skip.detail}"
    if held:
        return (Verdict.BUFFERED, "overlap",
                "held by the overlap policy while an earlier run was in flight; not dispatched "
                "by the end of the log")
    return _undecided(job, candidate)


def _fired(job: _Job, run_id: str, attempts: Sequence[Attempt]) -> tuple[Verdict, str, str]:
    settles = [e.event for e in job.history.answers
               if isinstance(e.event, RunSettled) and e.event.run_id == run_id]
    workers = sorted({w for a in attempts for w in a.workers})
    by = f" (worker {', '.join(workers)})" if workers else ""
    if not settles:
        return (Verdict.FIRED, "in_flight",
                f"fired as run {run_id}, attempt {attempts[-1].attempt}{by}; "
                "not settled by the end of the log")
    settle = settles[-1]
    assert isinstance(settle, RunSettled)
    if settle.status is RunStatus.CANCELLED:
        return (Verdict.CANCELLED, "cancelled",
                f"fired as run {run_id}, then cancelled ({settle.detail}) at attempt "
                f"{settle.attempts}{by}")
    return (Verdict.FIRED, settle.status.value,
            f"fired as run {run_id}: {settle.status.value} after {settle.attempts} attempt(s){by}")


def _undecided(job: _Job, candidate: _Candidate) -> tuple[Verdict, str, str]:
    """No decision in the log: why none was due, or whether it is pending or lost."""
    history, scheduled_for = job.history, candidate.scheduled_for_ms
    creations = [e for e in history.answers if isinstance(e.event, JobAccepted)]
    if not creations:
        return Verdict.NEVER_DUE, "never_created", "the job was never accepted in this log"
    created = event_time(creations[0])
    one_time = not isinstance(_spec(creations[0]).schedule, CronSchedule)
    if scheduled_for < created and not one_time:
        return (Verdict.NEVER_DUE, "not_yet_created",
                f"the job was created at {iso(created)}, after this occurrence")
    stop = _stop_before(history, max(scheduled_for, created))
    if stop is not None:
        change = stop.event.change  # type: ignore[union-attr]
        return (Verdict.CANCELLED, f"job_{change}",
                f"the job was {change} at {iso(event_time(stop))}, before this occurrence")
    spec = _spec(_spec_entry(history, scheduled_for) or creations[0])
    due = max(created, scheduled_for + offset_ms(job.job_id, scheduled_for, spec.spread_ms,
                                                 spec.jitter_ms))
    if due > job.end_ms - job.grace_ms:
        return (Verdict.PENDING, "not_yet_due",
                f"due at {iso(due)}; the log ends at {iso(job.end_ms)} (grace {job.grace_ms} ms)")
    return (Verdict.LOST, "lost",
            f"due at {iso(due)} while the job was live, but the log holds neither a RunDue "
            "nor a RunSkipped for it (invariant 1 broken)")


def _nothing_near(job: _Job, at_ms: int) -> Explanation:
    creations = [e for e in job.history.answers if isinstance(e.event, JobAccepted)]
    if creations:
        reason, summary = "no_occurrence", "the job's schedule has no occurrence near this time"
    else:
        reason, summary = "never_created", "the job was never accepted in this log"
    links = [_link(job, e) for e in (*job.history.commands, *job.history.answers)][:20]
    return Explanation(job.job_id, at_ms, Verdict.NEVER_DUE, reason, summary, None, None, None,
                       (), tuple(sorted(links, key=lambda link: link.at_ms)))


# -- lookups -----------------------------------------------------------------------------


def _buffered(history: JobHistory) -> list[Entry]:
    return [e for e in history.answers if isinstance(e.event, JobChanged)
            and e.event.change == "buffered" and e.event.reason.lstrip("-").isdigit()]


def _spec_entry(history: JobHistory, at_ms: int) -> Entry | None:
    """The JobAccepted in force at ``at_ms`` (or the first one, for a time before creation)."""
    accepted = [e for e in history.answers if isinstance(e.event, JobAccepted)]
    before = [e for e in accepted if event_time(e) <= at_ms]
    if before:
        return before[-1]
    return accepted[0] if accepted else None


def _spec(entry: Entry) -> JobSpec:
    assert isinstance(entry.event, JobAccepted)
    return entry.event.spec


def _stop_before(history: JobHistory, at_ms: int) -> Entry | None:
    return next((e for e in history.answers if isinstance(e.event, JobChanged)
                 and e.event.status in _STOPPED and event_time(e) <= at_ms), None)


def _completed_by(history: JobHistory, at_ms: int) -> Entry | None:
    """The JobChanged(completed) in force at ``at_ms``, if the job was completed then."""
    last: Entry | None = None
    for entry in history.answers:
        if event_time(entry) > at_ms:
            break
        if isinstance(entry.event, JobChanged):
            last = entry if entry.event.status is JobStatus.COMPLETED else None
        elif isinstance(entry.event, JobAccepted):
            last = None  # an update can give a completed job a new occurrence
    return last


def _stop_links(job: _Job) -> list[Link]:
    stops = [e for e in job.history.answers
             if isinstance(e.event, JobChanged) and e.event.status in _STOPPED]
    return [link for e in stops[:1] for link in _answer_links(job, e)]


def _answer_links(job: _Job, answer: Entry) -> list[Link]:
    """An answer on job-events, preceded by the command it answers when the log holds it."""
    command_id = getattr(answer.event, "command_id", "")
    links = [_link(job, c) for c in job.history.commands
             if command_id and getattr(c.event, "meta", None) is not None
             and c.event.meta.command_id == command_id]  # type: ignore[union-attr]
    return [*links[:1], _link(job, answer)]


def _link(job: _Job, entry: Entry) -> Link:
    return Link(event_time(entry), describe(entry.event, accepted=job.accepted.get(entry.cite, True)),
                entry.cite)


def _local(accepted: Entry | None, scheduled_for: int) -> str | None:
    return None if accepted is None else _local_of(_spec(accepted), scheduled_for)


def _local_of(spec: JobSpec, at_ms: int) -> str:
    tz = spec.schedule.tz if isinstance(spec.schedule, CronSchedule) else "UTC"
    return iso(at_ms, tz)

