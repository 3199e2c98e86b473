"""Registration: jobs/s through the client library and HTTP, and how fast the processor absorbs them.

Cases, interleaved round by round against the same run's raw transactional limit:

* ``submit_many`` of ``CommandClient`` (one ``send`` per command, then all acknowledgements)
  at several batch sizes;
* :func:`submit_many_batched`, a proposed replacement: commands grouped per partition with
  the default murmur2 partitioner and written with aiokafka's batch API
  (``create_batch``/``send_batch``), one 512 KiB batch per partition in flight;
* HTTP: ``POST /v1/jobs`` against a ``tickwheel gateway`` subprocess, with several
  concurrent aiohttp clients (the per-team create limit is lifted for the run: the
  benchmark measures the path, not the limiter);
* absorption: a processor subprocess consuming the registrations; JobAccepted committed per
  second, from the first submission until all N are answered on ``job-events``.

``--profile`` prints a cProfile of one ``submit_many`` call, to show where the time goes.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import os
import pstats
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from bench.common import (
    RAW_LIMIT_LABEL,
    BenchResult,
    Results,
    Workload,
    bench_argparser,
    bench_broker,
    emit,
    format_ratio,
    format_spread,
    format_table,
    raw_txn_produce,
    run_rounds_async,
)
from bench.synth import bench_settings, committed_count, now_ms, processor_env, start_processor
from tickwheel.client import CommandClient
from tickwheel.localbroker import free_port
from tickwheel.schemas import mappers
from tickwheel.schemas.model import Command, CommandMeta, CreateJob, ExecutorSpec, JobSpec, OneTime
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

PARTITIONS = 4
BATCH_BYTES = 512 * 1024
DAY_MS = 86_400_000
_counter = iter(range(1 << 62))


def make_commands(n: int, tag: str) -> list[Command]:
    """n CreateJob commands for distinct one-time jobs a day out (distinct ids every call)."""
    at = now_ms() + DAY_MS
    spec = JobSpec(team="bench", name="reg", schedule=OneTime(at), executor=ExecutorSpec("noop"))
    base = next(_counter) * 10_000_000
    return [
        CreateJob(CommandMeta(f"c-{tag}-{base + i}", f"{tag}-{base + i:012d}", now_ms(), "bench"), spec)
        for i in range(n)
    ]


async def submit_many_batched(producer: AIOKafkaProducer, topic: str, commands: list[Command]) -> list[str]:
    """Append commands grouped per partition (murmur2 of the job id) with the batch API.

    Same partitions as ``send`` with the default partitioner, so per-job order holds; the
    producer should be idempotent with ``max_batch_size`` large enough for many commands.
    """
    partitions = sorted(await producer.partitions_for(topic))
    partitioner = DefaultPartitioner()
    batches = {p: producer.create_batch() for p in partitions}
    futures: list[asyncio.Future[object]] = []
    for command in commands:
        key = command.meta.job_id.encode()
        value = mappers.to_bytes(command)
        p = partitioner(key, partitions, partitions)
        if batches[p].append(key=key, value=value, timestamp=None) is None:  # full: ship it
            futures.append(await producer.send_batch(batches[p], topic, partition=p))
            batches[p] = producer.create_batch()
            batches[p].append(key=key, value=value, timestamp=None)
    for p, batch in batches.items():
        if batch.record_count():
            futures.append(await producer.send_batch(batch, topic, partition=p))
    await asyncio.gather(*futures)
    return [c.meta.command_id for c in commands]


async def client_case(settings: Settings, n: int, batch: int) -> dict[str, float]:
    """n registrations through ``CommandClient.submit_many`` in calls of ``batch`` commands."""
    chunks = [make_commands(min(batch, n - i), "cl") for i in range(0, n, batch)]
    async with CommandClient(settings, principal="bench") as client:
        started = time.perf_counter()
        for chunk in chunks:
            await client.submit_many(chunk)
        elapsed = time.perf_counter() - started
    return {"rate": n / elapsed}


def batched_producer(settings: Settings) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        enable_idempotence=True,
        acks="all",
        max_batch_size=BATCH_BYTES,
        linger_ms=0,
    )


async def batched_case(settings: Settings, n: int, batch: int) -> dict[str, float]:
    """n registrations through :func:`submit_many_batched` in calls of ``batch`` commands."""
    chunks = [make_commands(min(batch, n - i), "bt") for i in range(0, n, batch)]
    producer = batched_producer(settings)
    await producer.start()
    try:
        started = time.perf_counter()
        for chunk in chunks:
            await submit_many_batched(producer, settings.topic("commands"), chunk)
        elapsed = time.perf_counter() - started
    finally:
        await producer.stop()
    return {"rate": n / elapsed}


async def http_case(base_url: str, token: str, n: int, concurrency: int) -> dict[str, float]:
    """n ``POST /v1/jobs`` from ``concurrency`` keep-alive clients; 2xx answers per second."""
    at = now_ms() + DAY_MS
    tag = f"h{next(_counter)}"
    todo = iter(range(n))
    failures = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal failures
        for i in todo:
            body = {
                "job_id": f"{tag}-{i:09d}",
                "team": "bench",
                "name": "reg",
                "schedule": {"kind": "once", "at_ms": at},
                "executor": {"kind": "noop"},
            }
            headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": f"{tag}-{i}"}
            async with session.post(f"{base_url}/v1/jobs", json=body, headers=headers) as resp:
                await resp.read()
                if resp.status >= 300:
                    failures += 1

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{failures} of {n} POST /v1/jobs failed")
    return {"rate": n / elapsed}


async def absorb_case(bootstrap: str, n: int) -> dict[str, float]:
    """A fresh app with a running processor: N registrations, until all N JobAccepted commit."""
    home = Path(tempfile.mkdtemp(prefix="tw-absorb-"))
    name = f"ab{os.getpid()}x{now_ms() % 10_000_000}"
    settings = bench_settings(bootstrap, name, home, PARTITIONS)
    await create_topics(settings)
    proc = start_processor(settings)
    try:
        await asyncio.sleep(8)  # group join and (empty) restore, outside the timed span
        producer = batched_producer(settings)
        await producer.start()
        try:
            started = time.perf_counter()
            for first in range(0, n, 10_000):
                await submit_many_batched(
                    producer, settings.topic("commands"), make_commands(min(10_000, n - first), "ab")
                )
            submitted = time.perf_counter() - started
        finally:
            await producer.stop()
        deadline = time.monotonic() + 60 + n / 500
        while await committed_count(settings, "job-events") < n and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        elapsed = time.perf_counter() - started
        if await committed_count(settings, "job-events") < n:
            raise RuntimeError("processor did not answer every registration in time")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(home, ignore_errors=True)
    return {"rate": n / elapsed, "submit_rate": n / submitted}


def start_gateway(settings: Settings, token: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **processor_env(settings, "WARNING"),
        "TICKWHEEL_TOKEN": token,
        "TICKWHEEL_GATEWAY_PORT": str(port),
        "TICKWHEEL_GATEWAY_CREATES_PER_SECOND": "1000000",
        "TICKWHEEL_GATEWAY_CREATE_BURST": "1000000",
        "TICKWHEEL_GATEWAY_MAX_JOBS_PER_TEAM": "100000000",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tickwheel", "gateway", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.5)
    raise RuntimeError(f"{url} not up in {timeout_s:.0f} s")


async def profile_submit_many(settings: Settings, n: int) -> str:
    """cProfile of one ``submit_many`` of n commands: the top functions by cumulative time."""
    commands = make_commands(n, "pf")
    async with CommandClient(settings, principal="bench") as client:
        profiler = cProfile.Profile()
        profiler.enable()
        await client.submit_many(commands)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    return out.getvalue()


async def _main_async(bootstrap: str, n: int, http_n: int, rounds: int, profile: bool) -> tuple[Results, str]:
    home = Path(tempfile.mkdtemp(prefix="tw-register-"))
    name = f"reg{os.getpid()}x{now_ms() % 10_000_000}"
    settings = bench_settings(bootstrap, name, home, PARTITIONS)
    await create_topics(settings)
    token = secrets.token_hex(24)
    port = free_port()
    gateway = start_gateway(settings, token, port)
    base = f"http://127.0.0.1:{port}"
    try:
        await wait_http(f"{base}/healthz")
        cases: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
            RAW_LIMIT_LABEL: lambda: raw_txn_produce(bootstrap, Workload(50_000)),
            "client submit_many, 1,000 per call": lambda: client_case(settings, n, 1_000),
            "client submit_many, 10,000 per call": lambda: client_case(settings, n, 10_000),
            "batched (proposed), 1,000 per call": lambda: batched_case(settings, n, 1_000),
            "batched (proposed), 10,000 per call": lambda: batched_case(settings, n, 10_000),
            "HTTP POST /v1/jobs, 16 clients": lambda: http_case(base, token, http_n, 16),
            "processor absorbs (JobAccepted committed)": lambda: absorb_case(bootstrap, n),
        }
        results = await run_rounds_async(cases, rounds)
        prof = await profile_submit_many(settings, 10_000) if profile else ""
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        shutil.rmtree(home, ignore_errors=True)
    return results, prof


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("register", __doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, help="jobs per library case (default 50,000; quick 10,000)")
    parser.add_argument("--http-jobs", type=int, help="requests per HTTP case (default 5,000; quick 1,000)")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of submit_many")
    args = parser.parse_args(argv)
    n = args.jobs or (10_000 if args.quick else 50_000)
    http_n = args.http_jobs or (1_000 if args.quick else 5_000)
    rounds = args.rounds or (1 if args.quick else 3)
    with bench_broker(args.bootstrap) as broker:
        results, prof = asyncio.run(_main_async(broker.bootstrap, n, http_n, rounds, args.profile))
    limit = results[RAW_LIMIT_LABEL]["rate"].median
    rows = [
        [name, f"{m['rate'].median:,.0f}", format_spread(m["rate"]), format_ratio(m["rate"].median / limit)]
        for name, m in results.items()
    ]
    emit(
        BenchResult(
            name="register",
            title=f"Registration of one-time jobs, {PARTITIONS} partitions",
            params={"jobs": n, "http_jobs": http_n, "rounds": rounds},
            table=format_table(["case", "jobs/s (median)", "min-max", "x raw txn limit"], rows),
            notes=(
                "target: >= 20,000 jobs/s through the client library",
                "absorb: from the first submission (batched) until N JobAccepted are committed on job-events",
            ),
        ),
        args,
    )
    if prof:
        print(prof)
    return 0


if __name__ == "__main__":
    sys.exit(main())
