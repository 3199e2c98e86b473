"""The run driver's protocol with a fake sink and pool: lease before call, one outcome, self-stop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tickwheel.schemas.model import (
    ExecutorSpec,
    LogChunk,
    Outcome,
    RunDue,
    RunFailed,
    RunHeartbeat,
    RunStarted,
    RunSucceeded,
    RunTimedOut,
    RunTrigger,
)
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import ExecResult, ExecutorEnv, RunContext, builtin_registry
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.run import ActiveRun, RunDriver, RunPhase, Services, StopKind
from tickwheel.workers.secrets import SecretStore
from tickwheel.workers.ssrf import SsrfGuard, system_resolve
from tickwheel.workers.tenancy import Slots, TeamGate

NOW = 1_700_000_000_000


class FakeTime:
    def __init__(self) -> None:
        self.now = NOW

    def clock(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(1, round(seconds * 1000))
        await asyncio.sleep(0)


class FakeSink:
    def __init__(self) -> None:
        self.events: list[Outcome | LogChunk] = []
        self.fail_started = False
        self.fail_heartbeats = False

    async def outcome(self, event: Outcome) -> None:
        if (self.fail_started and isinstance(event, RunStarted)) or (
            self.fail_heartbeats and isinstance(event, RunHeartbeat)
        ):
            raise OSError("broker unreachable")
        self.events.append(event)

    async def log(self, chunk: LogChunk) -> None:
        self.events.append(chunk)

    def kinds(self) -> list[str]:
        return [type(e).__name__ for e in self.events if not isinstance(e, RunHeartbeat)]


class FakePool:
    pool = "default"

    def __init__(self, may_start: bool = True, *, cancelled_after_lease: bool = False) -> None:
        self.team_gate = TeamGate({})
        self.team_gate.set_assignment(1, 1)
        self._may_start = may_start
        self._cancelled_after_lease = cancelled_after_lease
        self.log: list[str] = []

    async def may_start(self, run: ActiveRun) -> bool:
        self.log.append("checked")
        if self._cancelled_after_lease and "acked" in self.log:
            return False  # a cancel committed while the RunStarted was being written
        return self._may_start

    def mark_started(self, run: ActiveRun) -> None:
        self.log.append("marked")

    def lease_acked(self, run: ActiveRun) -> None:
        self.log.append("acked")


class Gate:
    """A test executor that waits for the test to let it finish, and records cancellation."""

    release = asyncio.Event()
    entered = asyncio.Event()
    cancelled = False

    def __init__(self, config: Mapping[str, Any], env: ExecutorEnv) -> None:
        self.result = str(config.get("result", "done"))

    async def run(self, ctx: RunContext) -> ExecResult:
        Gate.entered.set()
        ctx.output.write(f"working with {self.result}\n")
        try:
            await Gate.release.wait()
        except asyncio.CancelledError:
            Gate.cancelled = True
            raise
        return ExecResult.success(self.result)


def _setup(sink: FakeSink, time: FakeTime, pool: FakePool) -> RunDriver:
    Gate.release, Gate.entered, Gate.cancelled = asyncio.Event(), asyncio.Event(), False
    config = WorkerConfig(worker_id="w-1", kill_grace_ms=100)
    registry = builtin_registry()
    registry.register("gate", Gate)
    env = ExecutorEnv(config, SsrfGuard((), system_resolve), registry, time.sleep)
    secrets = SecretStore(environ={"TICKWHEEL_SECRET_TOKEN": "tok-SECRET"})
    services = Services(
        config,
        sink,
        time.clock,
        WorkerMetrics.create(),
        secrets,
        registry,
        env,
        asyncio.Semaphore(4),
        time.sleep,
    )
    return RunDriver(services, pool)


def _run(kind: str = "gate", config: Any = None, *, timeout_ms: int = 60_000) -> ActiveRun:
    spec = ExecutorSpec(kind, json.dumps(config if config is not None else {"result": {"secret": "TOKEN"}}))
    due = RunDue(
        "r-1",
        "job-1",
        "team-a",
        "default",
        2,
        NOW,
        NOW,
        NOW,
        RunTrigger.SCHEDULED,
        spec,
        timeout_ms=timeout_ms,
        lease_ms=3_000,
    )
    return ActiveRun(due, tp=("runs", 0), offset=7)


async def _drive(driver: RunDriver, run: ActiveRun) -> asyncio.Task[None]:
    run.task = asyncio.create_task(driver.drive(run))
    return run.task


async def test_lease_is_acked_before_the_call_and_one_outcome_follows() -> None:
    """RunStarted is acked before the executor runs; logs precede the single RunSucceeded."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    run = _run()
    task = await _drive(driver, run)
    await Gate.entered.wait()
    assert sink.kinds() == ["RunStarted"]
    assert pool.log == ["checked", "marked", "acked", "checked"]
    Gate.release.set()
    await task
    assert sink.kinds() == ["RunStarted", "LogChunk", "RunSucceeded"]
    started, chunk, succeeded = [e for e in sink.events if not isinstance(e, RunHeartbeat)]
    assert isinstance(started, RunStarted)
    assert started.attempt == 2
    assert started.worker_id == "w-1"
    assert started.lease_until_ms == started.at_ms + 3_000
    assert isinstance(chunk, LogChunk)
    assert chunk.data == "working with ***\n"
    assert isinstance(succeeded, RunSucceeded)
    assert succeeded.result == "***"
    assert run.phase is RunPhase.DONE


async def test_no_ack_no_execution() -> None:
    """If RunStarted is not acknowledged the executor is never called and nothing else is sent."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    sink.fail_started = True
    driver = _setup(sink, time, pool)
    run = _run()
    await (await _drive(driver, run))
    assert not Gate.entered.is_set()
    assert sink.events == []
    assert run.phase is RunPhase.DROPPED
    assert "acked" not in pool.log


async def test_cancel_rule_refusal_starts_nothing() -> None:
    """A run whose cancel was seen before the LSO is never leased."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool(may_start=False)
    driver = _setup(sink, time, pool)
    run = _run()
    await (await _drive(driver, run))
    assert sink.events == []
    assert run.phase is RunPhase.DROPPED
    assert "marked" not in pool.log


async def test_a_cancel_committed_while_the_lease_is_written_stops_the_run_before_the_call() -> None:
    """Fault: the cancel commits after step 3's LSO but before RunStarted is written (the race
    the chaos suite found). Checker: the second cancel rule, after the ack, sees it; the
    executor is never called and the attempt reports itself cancelled."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool(cancelled_after_lease=True)
    driver = _setup(sink, time, pool)
    run = _run()
    await asyncio.wait_for(await _drive(driver, run), 5)
    assert not Gate.entered.is_set()
    assert pool.log == ["checked", "marked", "acked", "checked"]
    assert sink.kinds() == ["RunStarted", "RunFailed"]
    failed = sink.events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_class == "Cancelled"
    assert not failed.retryable
    assert run.phase is RunPhase.DONE


async def test_lost_lease_stops_the_execution_and_reports_nothing() -> None:
    """When heartbeats cannot be acked before the stop point, the worker cancels and stays silent."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    sink.fail_heartbeats = True
    driver = _setup(sink, time, pool)
    run = _run()
    await (await _drive(driver, run))
    assert Gate.cancelled
    assert run.phase is RunPhase.ABANDONED
    assert sink.kinds() == ["RunStarted"]
    assert time.now >= NOW + 3_000 - 300


async def test_cancel_during_execution_stops_it() -> None:
    """A RunCancelled while running cancels the executor and reports RunFailed(Cancelled)."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    run = _run()
    task = await _drive(driver, run)
    await Gate.entered.wait()
    run.request_stop(StopKind.CANCELLED, "job cancelled")
    await task
    assert Gate.cancelled
    failed = sink.events[-1]
    assert isinstance(failed, RunFailed)
    assert failed.error_class == "Cancelled"
    assert not failed.retryable


async def test_job_timeout_reports_timed_out() -> None:
    """The job's timeout_ms cancels the executor and reports RunTimedOut."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    run = _run(timeout_ms=50)
    await (await _drive(driver, run))
    assert Gate.cancelled
    assert isinstance(sink.events[-1], RunTimedOut)


async def test_bad_config_or_missing_secret_fails_without_a_lease() -> None:
    """A config that cannot run is a final RunFailed naming the problem, with no RunStarted."""
    for kind, config, error in [
        ("nope", {}, "ExecutorConfigError"),
        ("gate", {"result": {"secret": "MISSING"}}, "SecretNotFound"),
        ("process", {"argv": "rm -rf /"}, "ExecutorConfigError"),
    ]:
        sink, time, pool = FakeSink(), FakeTime(), FakePool()
        driver = _setup(sink, time, pool)
        await (await _drive(driver, _run(kind, config)))
        assert sink.kinds() == ["RunFailed"]
        failed = sink.events[0]
        assert isinstance(failed, RunFailed)
        assert failed.error_class == error
        assert not failed.retryable


async def test_future_not_before_is_held_and_a_passed_start_deadline_drops() -> None:
    """A run is held until not_before; one whose start deadline has passed is not started."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    run = _run()
    run.due = replace(run.due, not_before_ms=NOW + 5_000)
    task = await _drive(driver, run)
    await Gate.entered.wait()
    assert time.now >= NOW + 5_000
    Gate.release.set()
    await task
    stale = _run()
    stale.due = replace(stale.due, flags=(f"start_by={NOW - 1}",))
    await (await _drive(driver, stale))
    assert stale.phase is RunPhase.DROPPED


class HeldAckSink(FakeSink):
    """Outcomes of the kinds in ``hold`` are acknowledged only when the test says so."""

    def __init__(self, *hold: type) -> None:
        super().__init__()
        self.hold = hold
        self.submitted: list[Outcome] = []
        self.acks: list[asyncio.Future[None]] = []
        self.waiting = asyncio.Event()

    async def outcome(self, event: Outcome) -> None:
        self.submitted.append(event)
        if isinstance(event, self.hold):
            ack: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.acks.append(ack)
            self.waiting.set()
            await ack
        await super().outcome(event)


async def _spin() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_the_executor_is_not_called_before_the_lease_is_acknowledged() -> None:
    """RunStarted submitted but not yet acknowledged: the executor has not been called; once acked, it is."""
    sink, time, pool = HeldAckSink(RunStarted), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    task = await _drive(driver, _run())
    await asyncio.wait_for(sink.waiting.wait(), 5)
    await _spin()
    assert [type(e) for e in sink.submitted] == [RunStarted]
    assert not Gate.entered.is_set()
    assert "acked" not in pool.log
    sink.acks[0].set_result(None)
    await asyncio.wait_for(Gate.entered.wait(), 5)
    assert pool.log == ["checked", "marked", "acked", "checked"]
    Gate.release.set()
    await asyncio.wait_for(task, 5)


async def test_through_the_kafka_sink_the_call_waits_for_the_broker_ack() -> None:
    """With the batching Kafka sink, the executor runs only after the RunStarted's batch is acknowledged."""
    from tests.unit.test_worker_sink import FakeProducer
    from tickwheel.workers.sink import KafkaSink

    producer, time, pool = FakeProducer(), FakeTime(), FakePool()
    driver = _setup(FakeSink(), time, pool)
    driver.s = replace(driver.s, sink=KafkaSink(producer, "outcomes", "logs"))
    task = await _drive(driver, _run())
    await asyncio.wait_for(producer.submitted.wait(), 5)
    await _spin()
    assert not Gate.entered.is_set()
    producer.batches[0][3].set_result(None)  # the broker acknowledges the RunStarted
    await asyncio.wait_for(Gate.entered.wait(), 5)
    Gate.release.set()
    async with asyncio.timeout(5):
        while len(producer.batches) < 3:  # then its log chunk and its outcome
            producer.ack_all()
            producer.submitted.clear()
            await producer.submitted.wait()
    producer.ack_all()
    await asyncio.wait_for(task, 5)


async def test_a_failed_lease_ack_through_the_kafka_sink_means_no_call() -> None:
    """A RunStarted batch the broker rejects: the run is dropped and the executor never called."""
    from tests.unit.test_worker_sink import FakeProducer
    from tickwheel.workers.sink import KafkaSink

    producer, time, pool = FakeProducer(), FakeTime(), FakePool()
    driver = _setup(FakeSink(), time, pool)
    driver.s = replace(driver.s, sink=KafkaSink(producer, "outcomes", "logs"))
    run = _run()
    task = await _drive(driver, run)
    await asyncio.wait_for(producer.submitted.wait(), 5)
    producer.batches[0][3].set_exception(OSError("not enough replicas"))
    await asyncio.wait_for(task, 5)
    assert not Gate.entered.is_set()
    assert run.phase is RunPhase.DROPPED
    assert len(producer.batches) == 1


async def test_the_worker_slot_is_free_while_the_outcome_is_being_acknowledged() -> None:
    """With one slot, a second run starts while the first one's RunSucceeded still waits for its ack."""
    sink, time, pool = HeldAckSink(RunSucceeded), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    driver.s = replace(driver.s, slots=Slots(1))
    first, second = _run("noop", {}), _run("noop", {})
    second.due = replace(second.due, run_id="r-2")
    tasks = [await _drive(driver, first), await _drive(driver, second)]
    async with asyncio.timeout(5):
        while len(sink.acks) < 2:  # both outcomes pending at once: the slot did not wait for them
            sink.waiting.clear()
            await sink.waiting.wait()
    assert [type(e).__name__ for e in sink.submitted] == [
        "RunStarted",
        "RunSucceeded",
        "RunStarted",
        "RunSucceeded",
    ]
    for ack in sink.acks:
        ack.set_result(None)
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert first.phase is RunPhase.DONE
    assert second.phase is RunPhase.DONE


async def test_a_lease_lapsed_before_the_call_is_not_executed() -> None:
    """A worker frozen while its RunStarted was acked past the stop point never calls and reports nothing."""

    class FreezingSink(FakeSink):
        async def outcome(self, event: Outcome) -> None:
            await super().outcome(event)
            if isinstance(event, RunStarted):
                time.now += 3_000  # the whole lease passed while the ack came back

    time, pool = FakeTime(), FakePool()
    sink = FreezingSink()
    driver = _setup(sink, time, pool)
    run = _run()
    await asyncio.wait_for(await _drive(driver, run), 5)
    assert not Gate.entered.is_set()
    assert run.phase is RunPhase.ABANDONED
    assert sink.kinds() == ["RunStarted"]


async def test_a_long_execution_heartbeats_and_a_quick_one_does_not() -> None:
    """The lease keeper runs for an execution that outlives its first wake-up, and not for an instant one."""
    sink, time, pool = HeldAckSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    await asyncio.wait_for(await _drive(driver, _run("noop", {})), 5)
    assert not any(isinstance(e, RunHeartbeat) for e in sink.events)
    sink.hold = (RunHeartbeat,)
    task = await _drive(driver, _run())
    await asyncio.wait_for(sink.waiting.wait(), 5)  # a heartbeat was sent
    sink.acks[0].set_result(None)
    Gate.release.set()
    await asyncio.wait_for(task, 5)
    assert isinstance(sink.events[-1], RunSucceeded)


async def test_a_run_that_prints_nothing_sends_no_log_chunk() -> None:
    """No output, no LogChunk: the outcome follows the lease directly."""
    sink, time, pool = FakeSink(), FakeTime(), FakePool()
    driver = _setup(sink, time, pool)
    await asyncio.wait_for(await _drive(driver, _run("noop", {})), 5)
    assert sink.kinds() == ["RunStarted", "RunSucceeded"]
