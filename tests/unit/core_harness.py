"""A settable-clock driver for the pure core (no sleeps, no Kafka).

The harness holds one job's state, applies inputs with :func:`core.step`, records every
event, and "advances the clock" by firing the timers ``timers_of(state)`` names, in due
order, with the clock set to each timer's due time: what the shell's wheel would do.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    CronSchedule,
    DeleteJob,
    ExecutorSpec,
    JobSpec,
    JobState,
    JobStatus,
    OneTime,
    PauseJob,
    ResumeJob,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunStarted,
    RunState,
    RunSucceeded,
    RunTimedOut,
    Schedule,
    TriggerJob,
    UpdateJob,
)
from tickwheel.streams.core import CoreConfig, Event, Input, step, timers_of
from tickwheel.streams.timers import Timer, TimerKind

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

E = TypeVar("E")


def spec(schedule: Schedule | None = None, **overrides: Any) -> JobSpec:
    """A valid job spec (every minute, UTC) with ``overrides`` applied."""
    base = JobSpec(
        team="team-a",
        name="nightly",
        schedule=schedule if schedule is not None else CronSchedule("* * * * *"),
        executor=ExecutorSpec("http", '{"url": "http://example.invalid"}'),
    )
    return replace(base, **overrides)


def cron(expr: str, tz: str = "UTC", **overrides: Any) -> JobSpec:
    return spec(CronSchedule(expr, tz), **overrides)


def once(at_ms: int, **overrides: Any) -> JobSpec:
    return spec(OneTime(at_ms), **overrides)


@dataclass
class Harness:
    """One job, a settable clock, the events so far."""

    cfg: CoreConfig = field(default_factory=CoreConfig)
    now: int = T0
    job_id: str = "job-1"
    state: JobState | None = None
    events: list[Event] = field(default_factory=list)
    _seq: int = 0

    # -- driving ------------------------------------------------------------------------

    def apply(self, inp: Input) -> list[Event]:
        """Step one input at the current clock; record and return its events."""
        self.state, events = step(self.state, inp, self.now, self.cfg)
        self.events.extend(events)
        return events

    def advance(
        self,
        to_ms: int,
        *,
        lookahead_ms: int = 0,
        succeed_runs: bool = False,
        max_steps: int = 100_000,
    ) -> list[Event]:
        """Fire every timer due by ``to_ms`` in due order, then leave the clock at ``to_ms``.

        FIRE timers due up to ``to_ms + lookahead_ms`` are handed early (look-ahead dispatch);
        each timer runs with the clock at its due time, or at ``to_ms`` if that is earlier.
        With ``succeed_runs``, a worker starts and finishes every RunDue at once.
        """
        out: list[Event] = []
        for _ in range(max_steps):
            timer = self.next_timer(to_ms, lookahead_ms)
            if timer is None:
                self.now = max(self.now, to_ms)
                return out
            self.now = max(self.now, min(timer.due_ms, to_ms))
            events = self.apply(timer)
            out += events
            if succeed_runs:
                out += self.succeed_all(self.dues(events))
        raise AssertionError("timers kept firing: a timer that does nothing stayed due")

    def succeed_all(self, dues: Iterable[RunDue]) -> list[Event]:
        """A worker takes and completes each of these dispatches now."""
        out: list[Event] = []
        for due in dues:
            out += self.start(due.run_id, attempt=due.attempt)
            out += self.succeed(due.run_id, attempt=due.attempt)
        return out

    def advance_by(self, delta_ms: int, **kwargs: Any) -> list[Event]:
        return self.advance(self.now + delta_ms, **kwargs)

    def next_timer(self, to_ms: int, lookahead_ms: int = 0) -> Timer | None:
        due = [
            t
            for t in timers_of(self.state)
            if t.due_ms <= to_ms + (lookahead_ms if t.kind is TimerKind.FIRE else 0)
        ]
        return min(due, default=None)

    def timers(self) -> frozenset[Timer]:
        return timers_of(self.state)

    def timer(self, kind: TimerKind) -> Timer:
        (found,) = [t for t in self.timers() if t.kind is kind]
        return found

    # -- commands -----------------------------------------------------------------------

    def meta(self, command_id: str | None = None) -> CommandMeta:
        self._seq += 1
        return CommandMeta(command_id or f"cmd-{self._seq}", self.job_id, self.now, "alice")

    def create(self, job_spec: JobSpec | None = None, command_id: str | None = None) -> list[Event]:
        return self.apply(CreateJob(self.meta(command_id), job_spec or spec()))

    def update(
        self, job_spec: JobSpec, expected_version: int | None = None, command_id: str | None = None
    ) -> list[Event]:
        version = expected_version if expected_version is not None else self.job.version
        return self.apply(UpdateJob(self.meta(command_id), job_spec, version))

    def pause(self, command_id: str | None = None) -> list[Event]:
        return self.apply(PauseJob(self.meta(command_id)))

    def resume(self, command_id: str | None = None) -> list[Event]:
        return self.apply(ResumeJob(self.meta(command_id)))

    def cancel(self, command_id: str | None = None) -> list[Event]:
        return self.apply(CancelJob(self.meta(command_id)))

    def delete(self, command_id: str | None = None) -> list[Event]:
        return self.apply(DeleteJob(self.meta(command_id)))

    def trigger(self, command_id: str | None = None) -> list[Event]:
        return self.apply(TriggerJob(self.meta(command_id)))

    # -- the worker side ----------------------------------------------------------------

    def _current(self, run_id: str | None, attempt: int | None) -> tuple[str, int]:
        run = self.run(run_id) if run_id else self.only_run()
        return run.run_id, attempt if attempt is not None else run.attempt

    def start(
        self, run_id: str | None = None, worker: str = "w1", lease_ms: int = MINUTE,
        attempt: int | None = None,
    ) -> list[Event]:
        rid, att = self._current(run_id, attempt)
        return self.apply(RunStarted(rid, self.job_id, att, worker, self.now + lease_ms, self.now))

    def heartbeat(
        self, run_id: str | None = None, worker: str = "w1", lease_ms: int = MINUTE,
        attempt: int | None = None,
    ) -> list[Event]:
        rid, att = self._current(run_id, attempt)
        return self.apply(RunHeartbeat(rid, self.job_id, att, worker, self.now + lease_ms, self.now))

    def succeed(
        self, run_id: str | None = None, worker: str = "w1", attempt: int | None = None
    ) -> list[Event]:
        rid, att = self._current(run_id, attempt)
        return self.apply(RunSucceeded(rid, self.job_id, att, worker, self.now, "ok"))

    def fail(
        self, run_id: str | None = None, worker: str = "w1", *, retryable: bool = True,
        attempt: int | None = None,
    ) -> list[Event]:
        rid, att = self._current(run_id, attempt)
        return self.apply(
            RunFailed(rid, self.job_id, att, worker, self.now, retryable, "Boom", "it broke")
        )

    def timed_out(
        self, run_id: str | None = None, worker: str = "w1", attempt: int | None = None
    ) -> list[Event]:
        rid, att = self._current(run_id, attempt)
        return self.apply(RunTimedOut(rid, self.job_id, att, worker, self.now))

    # -- queries ------------------------------------------------------------------------

    @property
    def job(self) -> JobState:
        assert self.state is not None, "the job does not exist"
        return self.state

    def status(self) -> JobStatus | None:
        return None if self.state is None else self.state.status

    def run(self, run_id: str) -> RunState:
        (found,) = [r for r in self.job.runs if r.run_id == run_id]
        return found

    def only_run(self) -> RunState:
        (found,) = self.job.runs
        return found

    def of(self, kind: type[E], events: Iterable[Event] | None = None) -> list[E]:
        """The recorded events (or ``events``) of one type, in order."""
        return [e for e in (self.events if events is None else events) if isinstance(e, kind)]

    def dues(self, events: Iterable[Event] | None = None) -> list[RunDue]:
        return self.of(RunDue, events)
