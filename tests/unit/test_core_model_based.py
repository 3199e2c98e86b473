"""The scheduler core against a small reference model, driven by a hypothesis state machine.

The machine drives one job through ``core.step`` with random commands (create, pause, resume,
trigger, cancel, retried command ids), worker reports (starts, heartbeats, results, from the
lease holder, another worker or a stale attempt) and clock advances that fire the timers
``timers_of`` names, as the shell's wheel does. The reference model keeps only what the
invariants talk about: the occurrences decided, the runs in flight with their current
attempt and lease holder, and whether the job was cancelled. Every step checks:

* each (run id, attempt) is dispatched at most once, and attempts grow by exactly one;
* a report for anything but the current attempt, or a second lease of it, changes nothing;
* each occurrence is decided once, in schedule order, without gaps, and none that is due
  is left undecided while the job is live (nothing lost);
* nothing is dispatched once the job is cancelled; its runs are cancelled and settled;
* the state's runs are exactly the model's, ``timers_of`` names a timer for each run in
  flight, and folding every event from nothing gives the state (evolve is the truth).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.unit.core_harness import T0, cron, once
from tickwheel.schemas.model import (
    CancelJob,
    CommandMeta,
    CreateJob,
    JobChanged,
    JobRejected,
    JobState,
    JobStatus,
    OverlapPolicy,
    PauseJob,
    ResumeJob,
    RetryPolicy,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunSettled,
    RunSkipped,
    RunStarted,
    RunSucceeded,
    RunTrigger,
    TriggerJob,
    run_id_for,
)
from tickwheel.streams.core import CoreConfig, Event, evolve, step, timers_of
from tickwheel.streams.schedule import next_occurrence
from tickwheel.streams.timers import TimerKind

JOB = "job-m"
WORKERS = ("w1", "w2")
CFG = CoreConfig(start_timeout_ms=20_000, misfire_tolerance_ms=60_000, min_interval_ms=1_000)


@dataclass
class Model:
    """What the invariants need to remember, and nothing else."""

    created: bool = False
    cancelled: bool = False
    dispatched: set[tuple[str, int]] = field(default_factory=set)
    attempt: dict[str, int] = field(default_factory=dict)  # run id -> current attempt, in flight
    holder: dict[str, str] = field(default_factory=dict)  # run id -> worker holding its lease
    decided: list[int] = field(default_factory=list)  # scheduled_for of decided occurrences
    buffered: set[int] = field(default_factory=set)  # decided, held by buffer_* overlap


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.state: JobState | None = None
        self.events: list[Event] = []
        self.model = Model()
        self.commands = 0
        self.last_command: CreateJob | PauseJob | ResumeJob | TriggerJob | CancelJob | None = None
        self.spec = cron("*/10 * * * * *")

    # -- driving ----------------------------------------------------------------------------

    def _step(self, inp: object) -> list[Event]:
        self.state, events = step(self.state, inp, self.now, CFG)  # type: ignore[arg-type]
        self.events += events
        for event in events:
            self._observe(event)
        return events

    def _meta(self) -> CommandMeta:
        self.commands += 1
        return CommandMeta(f"cmd-{self.commands}", JOB, self.now, "model")

    def _command(self, command: CreateJob | PauseJob | ResumeJob | TriggerJob | CancelJob) -> None:
        self.last_command = command
        self._step(command)

    # -- the model's view of each event -----------------------------------------------------------

    def _observe(self, event: Event) -> None:
        m = self.model
        if isinstance(event, RunDue):
            assert not m.cancelled, f"dispatched after cancel: {event}"
            key = (event.run_id, event.attempt)
            assert key not in m.dispatched, f"duplicate dispatch {key}"
            m.dispatched.add(key)
            if event.trigger in (RunTrigger.RETRY, RunTrigger.LEASE_EXPIRED):
                assert m.attempt.get(event.run_id) == event.attempt - 1, f"attempt jump {event}"
            else:
                assert event.attempt == 1
                assert event.run_id not in m.attempt
            m.attempt[event.run_id] = event.attempt
            m.holder.pop(event.run_id, None)
            own = event.run_id == run_id_for(JOB, event.scheduled_for_ms)
            if event.trigger is RunTrigger.SCHEDULED and own:
                self._decide(event.scheduled_for_ms)
        elif isinstance(event, RunSkipped):
            self._decide(event.scheduled_for_ms)
        elif isinstance(event, JobChanged) and event.change == "buffered":
            self._decide(int(event.reason))
            self.model.buffered.add(int(event.reason))
        elif isinstance(event, RunStarted):
            assert event.run_id not in m.holder, f"second lease of {event.run_id}"
            m.holder[event.run_id] = event.worker_id
        elif isinstance(event, RunSettled):
            m.attempt.pop(event.run_id, None)
            m.holder.pop(event.run_id, None)
        elif isinstance(event, JobChanged) and event.status is JobStatus.CANCELLED:
            m.cancelled = True

    def _decide(self, scheduled_for: int) -> None:
        if scheduled_for in self.model.buffered:  # released or skipped from the buffer
            self.model.buffered.discard(scheduled_for)
            return
        decided = self.model.decided
        assert scheduled_for not in decided, f"occurrence {scheduled_for} decided twice"
        if decided and scheduled_for > decided[-1]:
            following = next_occurrence(self.spec.schedule, decided[-1])
            assert following is not None
            assert following.at_ms == scheduled_for, "gap in occurrences"
        decided.append(scheduled_for)

    # -- rules ------------------------------------------------------------------------------------

    @precondition(lambda self: not self.model.created)
    @rule(kind=st.sampled_from(["cron", "once"]), overlap=st.sampled_from(list(OverlapPolicy)),
          attempts=st.integers(1, 3))
    def create(self, kind: str, overlap: OverlapPolicy, attempts: int) -> None:
        retry = RetryPolicy(max_attempts=attempts, backoff_initial_ms=2_000, backoff_max_ms=8_000)
        base = cron("*/10 * * * * *") if kind == "cron" else once(self.now + 15_000)
        self.spec = replace(base, overlap=overlap, retry=retry, lease_ms=6_000, timeout_ms=30_000)
        self.model.created = True
        self._command(CreateJob(self._meta(), self.spec))

    @precondition(lambda self: self.model.created)
    @rule(which=st.sampled_from(["pause", "resume", "trigger", "cancel"]))
    def command(self, which: str) -> None:
        kinds = {"pause": PauseJob, "resume": ResumeJob, "trigger": TriggerJob, "cancel": CancelJob}
        self._command(kinds[which](self._meta()))

    @precondition(lambda self: self.last_command is not None)
    @rule()
    def retried_command(self) -> None:
        """A client retry: the same command id again changes nothing (a rejection is re-judged)."""
        before = self.state
        assert self.last_command is not None
        events = self._step(self.last_command)
        assert all(isinstance(e, JobRejected) for e in events), events
        assert self.state == before

    @precondition(lambda self: self.model.created)
    @rule(ms=st.integers(0, 40_000))
    def advance(self, ms: int) -> None:
        """Fire every timer due by now + ms, in due order, each at its own time."""
        target = self.now + ms
        for _ in range(10_000):
            due = sorted(t for t in timers_of(self.state) if t.due_ms <= target)
            if not due:
                break
            self.now = max(self.now, due[0].due_ms)
            self._step(due[0])
        self.now = target

    @precondition(lambda self: bool(self.model.attempt))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS), stale=st.booleans(),
          report=st.sampled_from(["start", "heartbeat", "succeed", "fail", "fail_final"]))
    def worker_report(self, data: st.DataObject, worker: str, stale: bool, report: str) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.model.attempt)))
        attempt = self.model.attempt[run_id] - (1 if stale else 0)
        outcome = _report(report, run_id, attempt, worker, self.now)
        holder = self.model.holder.get(run_id)
        expect_nothing = (
            attempt != self.model.attempt[run_id]
            or (report == "start" and holder is not None)
            or (report != "start" and holder is not None and holder != worker)
            or (report == "heartbeat" and holder is None)
        )
        before = self.state
        events = self._step(outcome)
        if expect_nothing:
            assert events == [], f"{outcome} was not fenced: {events}"
            assert self.state == before

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def runs_are_the_models(self) -> None:
        runs = {} if self.state is None else {r.run_id: r.attempt for r in self.state.runs}
        assert runs == self.model.attempt

    @invariant()
    def every_run_in_flight_has_a_timer(self) -> None:
        if self.state is None:
            return
        timed = {t.run_id for t in timers_of(self.state) if t.kind is not TimerKind.FIRE}
        assert {r.run_id for r in self.state.runs} <= timed

    @invariant()
    def nothing_due_is_left_undecided(self) -> None:
        state = self.state
        if state is None or state.status not in (JobStatus.ACTIVE, JobStatus.PAUSED):
            return
        assert state.next_fire_ms is None or state.next_fire_ms > self.now - 1 or any(
            t.kind is TimerKind.FIRE and t.due_ms > self.now for t in timers_of(state)
        ), f"occurrence {state.next_fire_ms} is due at {self.now} but undecided"

    @invariant()
    def cancel_leaves_nothing_in_flight(self) -> None:
        if self.model.cancelled:
            assert self.state is not None
            assert not self.state.runs
            assert not timers_of(self.state)

    @invariant()
    def the_fold_of_the_events_is_the_state(self) -> None:
        folded: JobState | None = None
        for event in self.events:
            folded = evolve(folded, event)
        assert folded == self.state


def _report(kind: str, run_id: str, attempt: int, worker: str, now: int) -> object:
    if kind == "start":
        return RunStarted(run_id, JOB, attempt, worker, now + 6_000, now)
    if kind == "heartbeat":
        return RunHeartbeat(run_id, JOB, attempt, worker, now + 6_000, now)
    if kind == "succeed":
        return RunSucceeded(run_id, JOB, attempt, worker, now)
    return RunFailed(run_id, JOB, attempt, worker, now, kind == "fail", "Boom", "failed")


CoreMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestCoreAgainstModel = CoreMachine.TestCase
TestCoreAgainstModel.__doc__ = "The core keeps the model's invariants through commands, reports and time."
