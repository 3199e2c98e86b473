"""Construct a log as the processor would have committed it, by driving the pure core.

The processor takes its clock from the wall, so a history that needs a particular instant
(a spring-forward night, a week of downtime) cannot be recorded from a live processor. This
module plays the processor's shell with a settable clock: each input is appended to its
topic, then decided in its own step with ``core.step``; each step's published events go to
``runs``/``job-events``/``dlq`` in emission order, then the changed state to
``sched-changelog``, every record stamped with the step's clock, exactly as
``PartitionTask._commit`` writes one transaction. Timers fire in due order like the wheel.
The result is a list of transactions of :class:`LogRecord`, which tests replay directly or
produce to a real broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aiokafka.partitioner import murmur2

from tickwheel.replay.log import LogRecord, Role
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    Command,
    DeadLetter,
    JobState,
    Outcome,
    RunCancelled,
    RunDue,
    RunSkipped,
)
from tickwheel.streams import core
from tickwheel.streams.timers import Timer, TimerKind

_MAX_STEPS = 1_000_000


def partition_for(job_id: str, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner gives a job id's records."""
    return int(murmur2(job_id.encode()) & 0x7FFFFFFF) % partitions


@dataclass
class SyntheticProcessor:
    """A settable-clock stand-in for the processor that records what it would commit."""

    prefix: str = "tickwheel."
    partitions: int = 1
    cfg: core.CoreConfig = field(default_factory=core.CoreConfig)
    lag_ms: int = 3  # how long after an input is written the processor decides it
    now: int = 0
    states: dict[str, JobState | None] = field(default_factory=dict)
    transactions: list[list[LogRecord]] = field(default_factory=list)
    _offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    _last_step: int = -(2**62)

    @property
    def records(self) -> list[LogRecord]:
        return [record for transaction in self.transactions for record in transaction]

    def topic(self, role: Role) -> str:
        return f"{self.prefix}{role.value}"

    # -- inputs ---------------------------------------------------------------------------

    def command(self, cmd: Command, at_ms: int | None = None) -> list[core.Event]:
        """A client appends ``cmd`` at ``at_ms``; the processor decides it ``lag_ms`` later."""
        return self.batch([cmd], at_ms)

    def outcome(self, outcome: Outcome, at_ms: int | None = None) -> list[core.Event]:
        """A worker appends ``outcome`` at ``at_ms`` (default: its own ``at_ms``)."""
        return self.batch([outcome], outcome.at_ms if at_ms is None else at_ms)

    def batch(self, inputs: list[Command | Outcome], at_ms: int | None = None) -> list[core.Event]:
        """Inputs appended at ``at_ms`` and decided together in one step, ``lag_ms`` later,
        followed in the same step by the timers already due then (as the processor does)."""
        written = self.now if at_ms is None else at_ms
        records = [self._record(_input_role(inp), _job_of(inp), mappers.to_bytes(inp), written)
                   for inp in inputs]
        self.now = max(self.now, written + self.lag_ms)
        due = self._due_timers(self.now, 0)
        work: list[tuple[str, core.Input]] = [(_job_of(inp), inp) for inp in inputs]
        work += [(timer.job_id, timer) for timer in due]
        return self._step(work, records)

    def advance(self, to_ms: int, lookahead_ms: int = 0) -> list[core.Event]:
        """Fire every timer due by ``to_ms`` (FIRE up to ``lookahead_ms`` early), in due order,
        one step per distinct due time."""
        out: list[core.Event] = []
        for _ in range(_MAX_STEPS):
            due = self._due_timers(to_ms, lookahead_ms)
            if not due:
                self.now = max(self.now, to_ms)
                return out
            self.now = max(self.now, min(due[0].due_ms, to_ms))
            ready = self._due_timers(self.now, lookahead_ms)
            out += self._step([(timer.job_id, timer) for timer in ready], [])
        raise RuntimeError("timers kept firing without the state moving on")

    def state(self, job_id: str) -> JobState | None:
        return self.states.get(job_id)

    def next_due(self, lookahead_ms: int = 0) -> int | None:
        """When the earliest timer of any job is due (FIRE ``lookahead_ms`` early), if any."""
        dues = [timer.due_ms - (lookahead_ms if timer.kind is TimerKind.FIRE else 0)
                for state in self.states.values() for timer in core.timers_of(state)]
        return min(dues, default=None)

    # -- the shell ------------------------------------------------------------------------

    def _step(self, work: list[tuple[str, core.Input]], inputs: list[LogRecord]) -> list[core.Event]:
        """One transaction: every input and timer decided at ``now``, then the changed states."""
        # A commit takes time (linger, EndTxn round trip): no two steps share a millisecond.
        self.now = max(self.now, self._last_step + 1)
        self._last_step = self.now
        before = {job_id: self.states.get(job_id) for job_id, _ in work}
        transaction = list(inputs)
        out: list[core.Event] = []
        for job_id, inp in work:
            state, events = core.step(self.states.get(job_id), inp, self.now, self.cfg)
            self.states[job_id] = state
            out += events
            transaction += [self._record(_role(event), job_id, mappers.to_bytes(event), self.now)
                            for event in core.published(events)]
        for job_id, old in before.items():
            new = self.states[job_id]
            if new != old:
                value = None if new is None else mappers.to_bytes(new)
                transaction.append(self._record(Role.CHANGELOG, job_id, value, self.now))
        self.transactions.append(transaction)
        return out

    def _record(self, role: Role, job_id: str, value: bytes | None, at_ms: int) -> LogRecord:
        topic = self.topic(role)
        partition = partition_for(job_id, self.partitions)
        offset = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = offset + 1
        return LogRecord(topic, partition, offset, at_ms, job_id.encode(), value)

    def _due_timers(self, to_ms: int, lookahead_ms: int) -> list[Timer]:
        return sorted(
            timer
            for state in self.states.values()
            for timer in core.timers_of(state)
            if timer.due_ms <= to_ms + (lookahead_ms if timer.kind is TimerKind.FIRE else 0)
        )


def _job_of(inp: Command | Outcome) -> str:
    meta = getattr(inp, "meta", None)
    return str(meta.job_id) if meta is not None else str(getattr(inp, "job_id"))  # noqa: B009


def _input_role(inp: Command | Outcome) -> Role:
    return Role.COMMANDS if hasattr(inp, "meta") else Role.OUTCOMES


def _role(event: core.Published) -> Role:
    if isinstance(event, DeadLetter):
        return Role.DLQ
    if isinstance(event, RunDue | RunCancelled | RunSkipped):
        return Role.RUNS
    return Role.JOB_EVENTS
