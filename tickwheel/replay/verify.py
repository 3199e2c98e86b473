"""``verify``: the architecture's invariants checked over a log, each breach citing its events.

1. ``duplicate_run_due``: a (run id, attempt) dispatched more than once (invariant 2).
2. ``lost_occurrence``: an occurrence due while the job was live (active or paused: the core
   explains paused ones with RunSkipped too) that the log neither dispatched, skipped nor
   buffered (invariant 1). Expected occurrences are recomputed independently of the
   processor, with ``schedule.py``, from each accepted spec over its lifetime: from its
   JobAccepted (a cron job's first occurrence is at or after acceptance; a one-time job's is
   its instant even if already past, then decided at acceptance) to the next spec version or
   the cancel/delete acknowledgement. Occurrences due within ``grace_ms`` of the end of the
   window (or of the log) are not judged yet.
3. ``started_after_cancel``: a RunStarted for a run the job had dispatched, timestamped after
   the job's cancel (or delete) acknowledgement (invariant 4).
4. ``stale_attempt_accepted``: a RunSettled whose attempt is not the run's current one; a
   success settled for an attempt no worker reported success for while another attempt did;
   a retry caused by no failure of the attempt it follows while another attempt failed; a
   changelog state showing a worker running an attempt it never started (fencing).
5. ``state_differs``: the latest ``sched-changelog`` state of a job (as of the window end)
   differs from the fold of the log at the same point (invariant 6).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from tickwheel.replay.history import JobHistory, event_time, matches
from tickwheel.replay.log import Cite, Entry
from tickwheel.replay.times import iso
from tickwheel.schemas.model import (
    JobAccepted,
    JobChanged,
    JobSpec,
    JobState,
    JobStatus,
    OneTime,
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
    run_id_for,
)
from tickwheel.streams.schedule import ScheduleError, next_occurrence, offset_ms

MAX_OCCURRENCES_PER_JOB = 200_000  # a guard against an every-second job over a year's window
_STOPPED = (JobStatus.CANCELLED, JobStatus.DELETED)
_FOREVER = 2**62


class Invariant(StrEnum):
    DUPLICATE_RUN_DUE = "duplicate_run_due"
    LOST_OCCURRENCE = "lost_occurrence"
    STARTED_AFTER_CANCEL = "started_after_cancel"
    STALE_ATTEMPT_ACCEPTED = "stale_attempt_accepted"
    STATE_DIFFERS = "state_differs"


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: Invariant
    job_id: str
    at_ms: int
    message: str
    events: tuple[Cite, ...]  # the exact records that show it, most telling first

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.invariant.value, "job_id": self.job_id, "at_ms": self.at_ms,
                "at": iso(self.at_ms), "message": self.message,
                "events": [cite.to_json() for cite in self.events]}


@dataclass(frozen=True, slots=True)
class Window:
    from_ms: int
    to_ms: int
    grace_ms: int

    def holds(self, at_ms: int) -> bool:
        return self.from_ms <= at_ms <= self.to_ms


@dataclass(frozen=True, slots=True)
class VerifyReport:
    window: Window
    jobs: int
    checked: Mapping[str, int]
    violations: tuple[Violation, ...]
    warnings: tuple[str, ...]

    @property
    def clean(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        w = self.window
        by_kind: dict[str, int] = defaultdict(int)
        for violation in self.violations:
            by_kind[violation.invariant.value] += 1
        return {
            "clean": self.clean,
            "window": {"from_ms": w.from_ms, "to_ms": w.to_ms, "from": iso(w.from_ms),
                       "to": iso(w.to_ms), "grace_ms": w.grace_ms},
            "jobs": self.jobs, "checked": dict(self.checked), "violation_counts": dict(by_kind),
            "violations": [v.to_json() for v in self.violations], "warnings": list(self.warnings),
        }


def verify(histories: Iterable[JobHistory], window: Window, *, end_ms: int,
           warnings: Sequence[str] = ()) -> VerifyReport:
    """Check every invariant over ``histories``; violations are those dated inside ``window``."""
    jobs = list(histories)
    checked: dict[str, int] = defaultdict(int)
    found: list[Violation] = []
    found += duplicate_dispatches(jobs, window, checked)
    horizon = min(window.to_ms, end_ms) - window.grace_ms
    for history in jobs:
        found += lost_occurrences(history, window.from_ms, horizon, checked)
        found += starts_after_cancel(history, window, checked)
        found += stale_attempts(history, window, checked)
        found += state_drift(history, window, checked)
    found.sort(key=lambda v: (v.at_ms, v.invariant.value, v.job_id))
    notes = [*warnings, *_incomplete(jobs)]
    return VerifyReport(window, len(jobs), dict(checked), tuple(found), tuple(notes))


# -- 1. duplicates ------------------------------------------------------------------------


def duplicate_dispatches(jobs: Sequence[JobHistory], window: Window,
                         checked: dict[str, int]) -> list[Violation]:
    groups: dict[tuple[str, int], list[Entry]] = defaultdict(list)
    for history in jobs:
        for entry in history.runs:
            if isinstance(entry.event, RunDue):
                groups[(entry.event.run_id, entry.event.attempt)].append(entry)
                checked["run_dues"] += 1
    found: list[Violation] = []
    for (run_id, attempt), entries in groups.items():
        if len(entries) > 1 and any(window.holds(e.cite.timestamp) for e in entries):
            cites = tuple(e.cite for e in entries)
            found.append(Violation(
                Invariant.DUPLICATE_RUN_DUE, entries[0].job_id, entries[1].cite.timestamp,
                f"run {run_id} attempt {attempt} dispatched {len(entries)} times: "
                + ", ".join(map(str, cites)), cites))
    return found


# -- 2. lost occurrences ------------------------------------------------------------------


def lost_occurrences(history: JobHistory, lo: int, hi: int,
                     checked: dict[str, int]) -> list[Violation]:
    """Occurrences due in ``[lo, hi]`` that the log never decided."""
    decided = _decided(history)
    found: list[Violation] = []
    for scheduled_for, due, accepted in expected_occurrences(history, lo, hi, decided):
        checked["occurrences"] += 1
        if scheduled_for in decided:
            continue
        version = accepted.event.version  # type: ignore[union-attr]
        found.append(Violation(
            Invariant.LOST_OCCURRENCE, history.job_id, due,
            f"occurrence {iso(scheduled_for)} (due {iso(due)}) of spec v{version} was neither "
            f"dispatched nor skipped (run {run_id_for(history.job_id, scheduled_for)})",
            (accepted.cite,)))
    return found


def expected_occurrences(
    history: JobHistory, lo: int, hi: int, decided: Mapping[int, int] | None = None
) -> Iterator[tuple[int, int, Entry]]:
    """``(scheduled_for, due, JobAccepted)`` of every occurrence due in ``[lo, hi]`` per spec."""
    decided = _decided(history) if decided is None else decided
    versions = [e for e in history.answers if isinstance(e.event, JobAccepted)]
    stops = [event_time(e) for e in history.answers
             if isinstance(e.event, JobChanged) and e.event.status in _STOPPED]
    for k, entry in enumerate(versions):
        accepted = entry.event
        assert isinstance(accepted, JobAccepted)
        start = event_time(entry)
        following = event_time(versions[k + 1]) if k + 1 < len(versions) else _FOREVER
        end = min(following, next((t for t in stops if t >= start), _FOREVER))
        prior = None if accepted.version == 1 else max(
            (s for s, t in decided.items() if t <= start), default=None)
        for scheduled_for, due in _occurrences(history.job_id, accepted.spec, start=start,
                                               end=end, prior=prior, lo=lo, hi=hi):
            yield scheduled_for, due, entry


def _occurrences(job_id: str, spec: JobSpec, *, start: int, end: int, prior: int | None,
                 lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """One spec version's occurrences in ``(prior, end]`` whose due time is in ``[lo, hi]``."""
    schedule = spec.schedule
    if isinstance(schedule, OneTime):
        at = schedule.at_ms
        due = max(start, at + _offset(job_id, spec, at))
        if (prior is None or at > prior) and at <= end and lo <= due <= hi:
            yield at, due
        return
    cursor = start - 1 if prior is None else max(start - 1, prior)
    cursor = max(cursor, lo - spec.spread_ms - spec.jitter_ms - 1)  # nothing earlier is due in time
    for _ in range(MAX_OCCURRENCES_PER_JOB):
        try:
            occurrence = next_occurrence(schedule, cursor)
        except ScheduleError:
            return
        if occurrence is None or occurrence.at_ms > min(end, hi):
            return
        due = occurrence.at_ms + _offset(job_id, spec, occurrence.at_ms)
        if lo <= due <= hi:
            yield occurrence.at_ms, due
        cursor = occurrence.at_ms


def _offset(job_id: str, spec: JobSpec, scheduled_for: int) -> int:
    return offset_ms(job_id, scheduled_for, spec.spread_ms, spec.jitter_ms)


def _decided(history: JobHistory) -> dict[int, int]:
    """``scheduled_for -> when first decided`` for every dispatched, skipped or buffered one."""
    decided: dict[int, int] = {}
    for entry in (*history.runs, *history.answers):
        event = entry.event
        scheduled_for: int | None = None
        if isinstance(event, RunSkipped) or (isinstance(event, RunDue) and event.run_id
                                             == run_id_for(history.job_id, event.scheduled_for_ms)):
            scheduled_for = event.scheduled_for_ms
        elif isinstance(event, JobChanged) and event.change == "buffered" \
                and event.reason.lstrip("-").isdigit():
            scheduled_for = int(event.reason)
        if scheduled_for is not None:
            decided[scheduled_for] = min(decided.get(scheduled_for, _FOREVER), event_time(entry))
    return decided


# -- 3. starts after cancel ---------------------------------------------------------------


def starts_after_cancel(history: JobHistory, window: Window,
                        checked: dict[str, int]) -> list[Violation]:
    acks = [e for e in history.answers
            if isinstance(e.event, JobChanged) and e.event.status in _STOPPED]
    found: dict[Cite, Violation] = {}
    for ack in acks:
        dispatched = {e.event.run_id: e for e in history.runs
                      if isinstance(e.event, RunDue) and event_time(e) <= event_time(ack)}
        for entry in history.outcomes:
            event = entry.event
            if not isinstance(event, RunStarted) or event.run_id not in dispatched:
                continue
            checked["starts"] += 1
            late = entry.cite.timestamp > ack.cite.timestamp
            if late and window.holds(entry.cite.timestamp) and entry.cite not in found:
                change = ack.event.change  # type: ignore[union-attr]
                found[entry.cite] = Violation(
                    Invariant.STARTED_AFTER_CANCEL, history.job_id, entry.cite.timestamp,
                    f"run {event.run_id} attempt {event.attempt} started by {event.worker_id} at "
                    f"{iso(entry.cite.timestamp)}, after the job was {change} at "
                    f"{iso(ack.cite.timestamp)} ({ack.cite})",
                    (entry.cite, ack.cite, dispatched[event.run_id].cite))
    return list(found.values())


# -- 4. stale attempts --------------------------------------------------------------------


def stale_attempts(history: JobHistory, window: Window,
                   checked: dict[str, int]) -> list[Violation]:
    index = _RunIndex.of(history)
    found = [*_stale_settles(history, index, window, checked), *_stale_retries(history, index, window)]
    found += _stale_leases(history, index, window)
    return found


@dataclass(frozen=True, slots=True)
class _RunIndex:
    """A job's run events and worker reports by run id (a long history has many runs)."""

    runs: Mapping[str, list[Entry]]
    reports: Mapping[str, list[Entry]]

    @classmethod
    def of(cls, history: JobHistory) -> _RunIndex:
        runs: dict[str, list[Entry]] = defaultdict(list)
        reports: dict[str, list[Entry]] = defaultdict(list)
        for entry in history.runs:
            runs[str(getattr(entry.event, "run_id", ""))].append(entry)
        for entry in history.outcomes:
            reports[str(getattr(entry.event, "run_id", ""))].append(entry)
        return cls(runs, reports)

    def current_due(self, run_id: str, at_ms: int) -> RunDue | None:
        """The highest attempt dispatched for ``run_id`` by ``at_ms``."""
        dues = [e.event for e in self.runs.get(run_id, ())
                if isinstance(e.event, RunDue) and event_time(e) <= at_ms]
        return max(dues, key=lambda due: due.attempt, default=None)

    def reported(self, run_id: str, *kinds: type) -> list[Entry]:
        return [e for e in self.reports.get(run_id, ()) if isinstance(e.event, kinds)]


def _stale_settles(history: JobHistory, index: _RunIndex, window: Window,
                   checked: dict[str, int]) -> list[Violation]:
    found: list[Violation] = []
    for entry in history.answers:
        settle = entry.event
        if not isinstance(settle, RunSettled) or not window.holds(entry.cite.timestamp):
            continue
        checked["settles"] += 1
        current = index.current_due(settle.run_id, event_time(entry))
        if current is not None and current.attempt != settle.attempts:
            dispatch = next(e.cite for e in index.runs[settle.run_id] if e.event == current)
            found.append(_stale(history, entry, (dispatch,),
                                f"run {settle.run_id} settled {settle.status.value} for attempt "
                                f"{settle.attempts}, but its current attempt was {current.attempt}"))
        elif settle.status is RunStatus.SUCCEEDED:
            reports = index.reported(settle.run_id, RunSucceeded)
            if reports and not any(_attempt(r) == settle.attempts for r in reports):
                found.append(_stale(history, entry, tuple(r.cite for r in reports),
                                    f"run {settle.run_id} settled succeeded at attempt "
                                    f"{settle.attempts}, but only other attempts reported success"))
    return found


def _stale_retries(history: JobHistory, index: _RunIndex, window: Window) -> list[Violation]:
    found: list[Violation] = []
    for entry in history.runs:
        due = entry.event
        if not (isinstance(due, RunDue) and due.trigger is RunTrigger.RETRY
                and window.holds(entry.cite.timestamp)):
            continue
        failures = index.reported(due.run_id, RunFailed, RunTimedOut)
        timeouts = [e for e in index.runs[due.run_id] if isinstance(e.event, RunCancelled)
                    and e.event.reason == "timeout"]
        if failures and not any(_attempt(e) == due.attempt - 1 for e in (*failures, *timeouts)):
            found.append(_stale(history, entry, tuple(r.cite for r in failures),
                                f"run {due.run_id} retried as attempt {due.attempt}, but only "
                                f"other attempts than {due.attempt - 1} reported a failure"))
    return found


def _stale_leases(history: JobHistory, index: _RunIndex, window: Window) -> list[Violation]:
    found: list[Violation] = []
    for entry in history.changelog:
        state = entry.event
        if not isinstance(state, JobState) or not window.holds(entry.cite.timestamp):
            continue
        for run in state.runs:
            if run.status is not RunStatus.RUNNING:
                continue
            starts = [e for e in index.reported(run.run_id, RunStarted)
                      if getattr(e.event, "worker_id", None) == run.worker_id]
            if starts and not any(_attempt(e) == run.attempt for e in starts):
                found.append(_stale(history, entry, tuple(e.cite for e in starts),
                                    f"state shows worker {run.worker_id} running attempt "
                                    f"{run.attempt} of run {run.run_id}, which it never started"))
    return found


def _stale(history: JobHistory, entry: Entry, evidence: tuple[Cite, ...], message: str) -> Violation:
    return Violation(Invariant.STALE_ATTEMPT_ACCEPTED, history.job_id, entry.cite.timestamp,
                     message, (entry.cite, *evidence))


def _attempt(entry: Entry) -> int:
    return int(getattr(entry.event, "attempt", -1))


# -- 5. state vs fold ---------------------------------------------------------------------


def state_drift(history: JobHistory, window: Window, checked: dict[str, int]) -> list[Violation]:
    latest = [e for e in history.changelog if e.cite.timestamp <= window.to_ms]
    if not latest:
        return []
    record = latest[-1]
    checked["states"] += 1
    agrees, folded = matches(history, record)
    stored = record.event if isinstance(record.event, JobState) else None
    differences = diff_states(folded, stored)
    if agrees or not differences:
        return []
    return [Violation(Invariant.STATE_DIFFERS, history.job_id, record.cite.timestamp,
                      "changelog state differs from the fold of the log: " + "; ".join(differences),
                      (record.cite,))]


def diff_states(folded: JobState | None, stored: JobState | None) -> list[str]:
    """Human-readable differences, ``fold=... changelog=...``, field by field."""
    if folded is None or stored is None:
        if folded is stored:
            return []
        return [f"fold={'absent' if folded is None else 'present'} "
                f"changelog={'absent' if stored is None else 'present'}"]
    return [f"{f.name}: fold={_short(getattr(folded, f.name))} "
            f"changelog={_short(getattr(stored, f.name))}"
            for f in fields(JobState) if getattr(folded, f.name) != getattr(stored, f.name)]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


def _incomplete(jobs: Sequence[JobHistory]) -> list[str]:
    return [f"job {h.job_id}: the log holds no JobAccepted; its history starts before the log"
            for h in jobs
            if h.job_id and (h.runs or h.outcomes)
            and not any(isinstance(e.event, JobAccepted) for e in h.answers)]
