"""The library face: ``Replayer(source).replay(log) -> ReplayResult``.

``source`` describes the deployment the log was taken from (its topic prefix, and how much
slack the processor is allowed at the end of a window); ``log`` is any iterable of
:class:`LogRecord`, read live (``replay.live``) or from an archive (``replay.archive``).
The result is immutable and answers the three questions of the CLI: the state at T, why an
occurrence did (not) fire, and whether the log keeps the invariants.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tickwheel.replay.describe import state_json
from tickwheel.replay.history import JobHistory, matches, state_at
from tickwheel.replay.log import Cite, Entry, LogRecord, Undecodable, decode, role_of
from tickwheel.replay.progress import Progress
from tickwheel.replay.times import iso
from tickwheel.replay.verify import VerifyReport, Window, diff_states, verify
from tickwheel.replay.why import Explanation, explain
from tickwheel.schemas.model import JobState

_PROGRESS_EVERY = 1_000
DEFAULT_GRACE_MS = 30_000  # how long after an occurrence is due the processor may take to decide it


class UnknownJobError(KeyError):
    """The log holds no record of the job asked about."""

    def __str__(self) -> str:
        return f"job {self.args[0]!r} does not appear in the log"


@dataclass(frozen=True, slots=True)
class Source:
    """Where a log comes from. ``prefix`` None recognises topics by their contract suffix."""

    prefix: str | None = None
    grace_ms: int = DEFAULT_GRACE_MS
    # Up to when the log is complete (a live read's start, an export's); None: its last record.
    end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class JobStateAt:
    """One job's folded state at T, cross-checked against its changelog record."""

    job_id: str
    state: JobState | None
    changelog: Cite | None  # the latest sched-changelog record at or before T
    differences: tuple[str, ...]  # fold vs that record (history.matches), empty if they agree

    @property
    def agrees(self) -> bool | None:
        return None if self.changelog is None else not self.differences

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "state": state_json(self.state),
                "changelog": None if self.changelog is None else self.changelog.to_json(),
                "changelog_agrees": self.agrees, "differences": list(self.differences)}


@dataclass(frozen=True, slots=True)
class StateReport:
    at_ms: int
    jobs: tuple[JobStateAt, ...]

    def to_json(self) -> dict[str, Any]:
        return {"at_ms": self.at_ms, "at": iso(self.at_ms), "jobs": [j.to_json() for j in self.jobs]}


@dataclass(frozen=True)
class ReplayResult:
    """A decoded, per-job indexed log and the questions it can answer."""

    source: Source
    histories: Mapping[str, JobHistory]
    records: int
    start_ms: int | None
    end_ms: int | None
    undecodable: tuple[Undecodable, ...] = ()
    unknown_topics: tuple[str, ...] = ()
    unkeyed: tuple[Entry, ...] = field(default=())  # dead letters of inputs that had no key

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(sorted(self.histories))

    def history(self, job_id: str) -> JobHistory:
        try:
            return self.histories[job_id]
        except KeyError:
            raise UnknownJobError(job_id) from None

    def state_at(self, at_ms: int, job_id: str | None = None) -> StateReport:
        """Every job's (or one job's) folded state as of ``at_ms``."""
        ids = [job_id] if job_id is not None else list(self.jobs)
        return StateReport(at_ms, tuple(self._job_state(self.history(j), at_ms) for j in ids))

    def why(self, job_id: str, at_ms: int) -> Explanation:
        """What happened to the job's occurrence nearest ``at_ms``."""
        return explain(self.history(job_id), at_ms, end_ms=self._end(), grace_ms=self.source.grace_ms)

    def verify(self, from_ms: int, to_ms: int) -> VerifyReport:
        """The invariants over ``[from_ms, to_ms]``."""
        window = Window(from_ms, to_ms, self.source.grace_ms)
        return verify(self.histories.values(), window, end_ms=self._end(), warnings=self.warnings())

    def warnings(self) -> list[str]:
        notes = [f"undecodable record {u.cite}: {u.reason}" for u in self.undecodable]
        notes += [f"topic {t!r} plays no known role; its records were ignored"
                  for t in self.unknown_topics]
        return notes

    def _job_state(self, history: JobHistory, at_ms: int) -> JobStateAt:
        state = state_at(history, at_ms)
        records = [e for e in history.changelog if e.cite.timestamp <= at_ms]
        if not records:
            return JobStateAt(history.job_id, state, None, ())
        record = records[-1]
        agrees, folded = matches(history, record)
        stored = record.event if isinstance(record.event, JobState) else None
        differences = () if agrees else tuple(diff_states(folded, stored))
        return JobStateAt(history.job_id, state, record.cite, differences)

    def _end(self) -> int:
        if self.source.end_ms is not None:
            return self.source.end_ms
        return self.end_ms if self.end_ms is not None else 0


class Replayer:
    """Decodes a log and indexes it per job; see the module docstring."""

    def __init__(self, source: Source | None = None) -> None:
        self.source = source or Source()

    def replay(self, log: Iterable[LogRecord], *, progress: Progress | None = None) -> ReplayResult:
        """Decode and index ``log`` (decoding dominates: about 0.1 ms a record)."""
        entries: dict[str, list[Entry]] = defaultdict(list)
        undecodable: list[Undecodable] = []
        unknown: set[str] = set()
        unkeyed: list[Entry] = []
        count, start, end = 0, None, None
        for record in log:
            count += 1
            if progress is not None and count % _PROGRESS_EVERY == 0:
                progress.advance(_PROGRESS_EVERY)
            start = record.timestamp if start is None else min(start, record.timestamp)
            end = record.timestamp if end is None else max(end, record.timestamp)
            role = role_of(record.topic, self.source.prefix)
            if role is None:
                unknown.add(record.topic)
                continue
            decoded = decode(record, role)
            if isinstance(decoded, Undecodable):
                undecodable.append(decoded)
            elif decoded.job_id:
                entries[decoded.job_id].append(decoded)
            else:
                unkeyed.append(decoded)
        if progress is not None:
            progress.advance(count % _PROGRESS_EVERY)
        histories = {job_id: JobHistory.build(job_id, found) for job_id, found in entries.items()}
        return ReplayResult(self.source, histories, count, start, end, tuple(undecodable),
                            tuple(sorted(unknown)), tuple(unkeyed))
