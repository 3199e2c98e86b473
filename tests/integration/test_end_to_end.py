"""End to end with the real processor and real worker processes, and `tickwheel up` itself."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.harness import Deployment, create_command, now_ms, submit
from tests.integration.http_target import HttpTarget
from tests.integration.kafka_util import read_all
from tickwheel.localbroker import free_port
from tickwheel.schemas import mappers
from tickwheel.schemas.model import (
    ExecutorSpec,
    JobSpec,
    OneTime,
    RetryPolicy,
    RunDue,
    RunSettled,
    RunStatus,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

LEASE_MS = 3_000


def _start_worker(deployment: Deployment, worker_id: str) -> subprocess.Popen[bytes]:
    env = deployment.env(
        TICKWHEEL_WORKER_ID=worker_id,
        TICKWHEEL_WORKER_SSRF_ALLOW="127.0.0.1",
        TICKWHEEL_WORKER_SHUTDOWN_GRACE_MS="1000",
    )
    log = (deployment.home / f"worker-{worker_id}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "tickwheel", "worker"], env=env, stdout=log, stderr=log)
    log.close()
    deployment.processes.append(proc)
    return proc


async def _settled(deployment: Deployment, job_id: str, timeout_s: float = 90) -> RunSettled:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for record in await read_all(
            deployment.settings.bootstrap_servers, deployment.settings.topic("job-events")
        ):
            event = mappers.job_event_from_bytes(record.value)
            if isinstance(event, RunSettled) and event.job_id == job_id:
                return event
        await asyncio.sleep(1)
    raise AssertionError(f"no RunSettled for {job_id}")


async def _run_dues(deployment: Deployment, job_id: str) -> list[RunDue]:
    records = await read_all(deployment.settings.bootstrap_servers, deployment.settings.topic("runs"))
    events = [mappers.run_event_from_bytes(r.value) for r in records]
    return [e for e in events if isinstance(e, RunDue) and e.job_id == job_id]


def _slow_job(target: HttpTarget) -> JobSpec:
    config = {"url": target.url("/slow?ms=60000&until_attempt=1"), "method": "POST"}
    return JobSpec(
        team="t",
        name="slow first attempt",
        schedule=OneTime(now_ms() + 2_000),
        executor=ExecutorSpec("http", json.dumps(config)),
        lease_ms=LEASE_MS,
        retry=RetryPolicy(max_attempts=3, backoff_initial_ms=500),
    )


@pytest.mark.parametrize("fault", ["sigkill", "sigstop"])
async def test_worker_lost_mid_call_lease_expires_and_the_effect_applies_once(
    bootstrap: str, tmp_path: Path, fault: str
) -> None:
    """Fault: the worker holding attempt 1 is SIGKILLed (or SIGSTOPped past its 3 s lease) mid-call.
    Checker: the real processor re-dispatches attempt 2 on lease expiry, a second worker runs it,
    the target sees one idempotency key twice and applies the effect once, the run settles
    SUCCEEDED, and the frozen worker's late report (older attempt) changes nothing."""
    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2)
    async with HttpTarget() as target:
        try:
            deployment.start_processor()
            first = _start_worker(deployment, "w-first")
            await submit(deployment.settings, [create_command("slow-job", _slow_job(target))])
            async with asyncio.timeout(90):
                (call,) = await target.wait_for_calls(1)
            first.send_signal(signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
            _start_worker(deployment, "w-second")
            settled = await _settled(deployment, "slow-job")
            if fault == "sigstop":
                first.send_signal(signal.SIGCONT)  # the zombie wakes up past its lease
                await asyncio.sleep(3)
            dues = await _run_dues(deployment, "slow-job")
            again = await _settled(deployment, "slow-job")
        finally:
            deployment.stop_all()
    assert call.idempotency_key is not None
    attempts = [c.attempt for c in target.calls_for(call.idempotency_key)]
    # A frozen worker that wakes may fetch attempt 2 from its old position before it learns
    # it lost the partition, and call the target again: the at-least-once window the
    # idempotency key exists for. Effects, not calls, must be exactly one.
    assert attempts[:2] == [1, 2]
    assert set(attempts) == {1, 2}
    assert fault == "sigstop" or attempts == [1, 2]
    assert target.effects[call.idempotency_key] == 1
    assert [d.attempt for d in dues] == [1, 2]
    assert dues[1].trigger.value == "lease_expired"
    assert settled.status is RunStatus.SUCCEEDED
    assert again == settled


def _free_block(size: int) -> int:
    """A base port with `size` consecutive free loopback ports."""
    for _ in range(50):
        base = free_port()
        ports = range(base, base + size)
        if all(_is_free(p) for p in ports):
            return base
    raise RuntimeError("no block of free ports")


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _tickwheel(
    args: list[str], env: dict[str, str], timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tickwheel", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_tickwheel_up_then_the_cli_creates_a_job_and_sees_its_run_succeed(tmp_path: Path) -> None:
    """`tickwheel up` starts everything (own broker and ports); `tickwheel jobs create` waits for
    the processor's answer (?wait=committed); the run succeeds; `tickwheel down` stops it all."""
    base = _free_block(3)
    broker_port = free_port()
    gateway_port = free_port()
    env = {
        **os.environ,
        "TICKWHEEL_HOME": str(tmp_path / "home"),
        "TICKWHEEL_BROKER_PORT": str(broker_port),
        "TICKWHEEL_CONTROLLER_PORT": str(free_port()),
        "TICKWHEEL_BOOTSTRAP_SERVERS": f"127.0.0.1:{broker_port}",
        "TICKWHEEL_GATEWAY_PORT": str(gateway_port),
        "TICKWHEEL_ECHO_PORT": str(free_port()),
        "TICKWHEEL_METRICS_PORT_BASE": str(base),
        "TICKWHEEL_PARTITIONS": "3",
        "TICKWHEEL_GATEWAY_URL": f"http://127.0.0.1:{gateway_port}",
    }
    env.pop("TICKWHEEL_TOKEN", None)
    try:
        up = _tickwheel(["up"], env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"http://127.0.0.1:{gateway_port}/ui" in up.stdout
        env["TICKWHEEL_TOKEN"] = (tmp_path / "home" / "admin-token").read_text().strip()
        at = now_ms() + 5_000
        created = _tickwheel(
            [
                "jobs",
                "create",
                "--team",
                "e2e",
                "--name",
                "hello",
                "--at",
                str(at),
                "--executor",
                "process",
                "--config",
                json.dumps({"argv": ["echo", "hello"]}),
                "--job-id",
                "e2e-hello",
                "--json",
            ],
            env,
        )
        assert created.returncode == 0, created.stdout + created.stderr
        assert "e2e-hello" in created.stdout
        runs: list[dict[str, object]] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            listed = _tickwheel(["jobs", "runs", "e2e-hello", "--json"], env, timeout=30)
            assert listed.returncode == 0, listed.stderr
            runs = json.loads(listed.stdout).get("items", [])
            if any(r.get("status") == "succeeded" for r in runs):
                break
            time.sleep(2)
        assert any(r.get("status") == "succeeded" for r in runs), runs
    finally:
        down = _tickwheel(["down"], env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "broker stopped" in down.stdout


async def test_client_library_submits_with_an_idempotency_key_and_reacts_to_the_settled_run(
    bootstrap: str, tmp_path: Path
) -> None:
    """CommandClient: one idempotency key submitted twice is one command id and one job;
    RunOutcomes yields the processor's RunSettled for the run a real worker executed."""
    from tickwheel.client import CommandClient, RunOutcomes

    deployment = await Deployment.create(bootstrap, tmp_path, partitions=2)
    spec = JobSpec(team="svc", name="noop", schedule=OneTime(now_ms() + 3_000), executor=ExecutorSpec("noop"))
    try:
        deployment.start_processor()
        _start_worker(deployment, "w-client")
        async with RunOutcomes(deployment.settings, group_id="reactor", from_beginning=True) as outcomes:
            async with CommandClient(deployment.settings, principal="svc-test") as client:
                first = await client.create("client-job", spec, idempotency_key="k-1")
                second = await client.create("client-job", spec, idempotency_key="k-1")
            async with asyncio.timeout(90):
                async for event in outcomes:
                    if isinstance(event, RunSettled) and event.job_id == "client-job":
                        settled = event
                        break
    finally:
        deployment.stop_all()
    assert first == second
    assert settled.status is RunStatus.SUCCEEDED
    answers = await read_all(bootstrap, deployment.settings.topic("job-events"))
    accepted = [
        e
        for e in map(mappers.job_event_from_bytes, (r.value for r in answers))
        if type(e).__name__ == "JobAccepted"
    ]
    assert len(accepted) == 1
