"""Hot instant: N one-time jobs due at the same instant, through the real processor.

Each round registers N jobs due at one instant T, runs the scheduler processor as its own
process (as in production: it gets a core of its own; ``--processors P`` runs P of them in
one group, splitting the partitions), waits until every RunDue is committed, and measures
from the committed ``runs`` records:

* dispatch rate: N / (last RunDue's commit - first RunDue's commit), RunDue/s;
* lag to commit: a RunDue's record timestamp (set at append, just before the commit) minus
  T, clamped at 0 (a look-ahead dispatch commits before T: lag 0); p50, p99 and max;
* the same round's raw transactional produce limit (``common.raw_txn_produce``) as the
  reference, so the ratio holds on a noisy machine.

Two cases: without look-ahead (every RunDue decided at or after T) and with look-ahead
(``lookahead_ms`` long enough that RunDue are committed before T with ``not_before = T``;
workers then hold them until T, so the burst leaves the critical instant).

With ``--workers K`` each round also runs K worker processes (pool ``default``, no-op
executor) and measures the lag from T to worker start: each attempt's ``RunStarted.at_ms``
(taken just before the worker calls the executor) minus T, clamped at 0, over the first
RunStarted of every run. The workers share the two cores with the processor and the broker,
so the dispatch rate of such a round is lower than the processor's alone. Each worker runs
``--worker-concurrency`` executions at once; their CPU from registration absorbed to the last
start, per run, is reported like the processor's (it includes reporting the outcomes that
overlap the starts).
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from bench.common import (
    RAW_LIMIT_LABEL,
    BenchResult,
    Workload,
    bench_argparser,
    bench_broker,
    emit,
    format_ratio,
    format_table,
    proc_cpu_seconds,
    raw_txn_produce,
    run_rounds_async,
    say,
)
from bench.synth import collect_run_dues, committed_count, now_ms, percentile
from tickwheel.client import CommandClient
from tickwheel.schemas import mappers
from tickwheel.schemas.model import CommandMeta, CreateJob, ExecutorSpec, JobSpec, OneTime, RunStarted
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

PARTITIONS = 4


async def _register(settings: Settings, n: int, instant: int) -> float:
    """Append n CreateJob commands; returns the client-side registration rate (jobs/s)."""
    spec = JobSpec(team="bench", name="hot", schedule=OneTime(instant), executor=ExecutorSpec("noop"))
    started = time.perf_counter()
    async with CommandClient(settings, principal="bench") as client:
        for first in range(0, n, 5_000):
            commands = [
                CreateJob(CommandMeta(f"c-hot-{i}", f"hot-{i:07d}", now_ms(), "bench"), spec)
                for i in range(first, min(n, first + 5_000))
            ]
            await client.submit_many(commands)  # type: ignore[arg-type]
    return n / (time.perf_counter() - started)


async def _tail(
    settings: Settings, topic: str, done: Callable[[], bool], timeout_s: float, take: Callable[[Any], None]
) -> None:
    """Hand every committed record of ``topic`` to ``take`` until ``done()`` or the timeout."""
    consumer = AIOKafkaConsumer(
        settings.topic(topic),
        bootstrap_servers=settings.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not done() and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for records in batch.values():
                for record in records:
                    take(record)
    finally:
        await consumer.stop()


async def collect_starts(settings: Settings, n: int, timeout_s: float) -> dict[str, int]:
    """run id -> ``at_ms`` of its first RunStarted, until n runs started or the timeout."""
    started: dict[str, int] = {}

    def take(record: Any) -> None:
        event = mappers.outcome_from_bytes(record.value)
        if isinstance(event, RunStarted):
            started.setdefault(event.run_id, event.at_ms)

    await _tail(settings, "outcomes", lambda: len(started) >= n, timeout_s, take)
    return started


def _cpu_seconds(*procs: subprocess.Popen[bytes]) -> float:
    """User + system CPU the processes have used: their cost, whatever else loads the machine."""
    return sum(proc_cpu_seconds(proc.pid) or 0.0 for proc in procs)


def _broker_cpu_seconds(pid: int | None) -> float:
    """The broker's CPU, when it is this run's own (NaN otherwise: not measured)."""
    return (proc_cpu_seconds(pid) or 0.0) if pid else math.nan


DEFAULT_WORKER_CONCURRENCY = 1_024


@dataclass(frozen=True, slots=True)
class Fleet:
    """The processes of a round besides the broker: processors, workers, executions per worker."""

    processors: int = 1
    workers: int = 0
    concurrency: int = DEFAULT_WORKER_CONCURRENCY


def start_workers(
    env: dict[str, str], fleet: Fleet, n: int, home: Path
) -> list[subprocess.Popen[bytes]]:
    """The fleet's worker processes of pool default (no-op executor), logs under ``home``."""
    workers = []
    for i in range(fleet.workers):
        worker_env = {**env, "TICKWHEEL_WORKER_ID": f"bench-w{i}",
                      "TICKWHEEL_WORKER_CONCURRENCY": str(fleet.concurrency),
                      "TICKWHEEL_WORKER_MAX_PENDING": str(max(20_000, n))}
        with (home / f"worker-{i}.log").open("ab") as log:
            workers.append(subprocess.Popen(
                [sys.executable, "-m", "tickwheel.workers.cli", "--pool", "default"], env=worker_env,
                stdout=subprocess.DEVNULL, stderr=log,
            ))
    return workers


async def hot_round(
    bootstrap: str, n: int, lookahead_ms: int, fleet: Fleet = Fleet(), broker_pid: int | None = None
) -> dict[str, float]:
    """One hot instant of n jobs through the fleet's processor and worker subprocesses."""
    home = Path(tempfile.mkdtemp(prefix="tw-hot-"))
    name = f"hot{os.getpid()}x{now_ms() % 10_000_000}"
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=f"{name}.", partitions=PARTITIONS, app_id=name,
        home=home, lookahead_ms=lookahead_ms,
    )
    await create_topics(settings)
    env = {
        **os.environ, "TICKWHEEL_BOOTSTRAP_SERVERS": bootstrap, "TICKWHEEL_TOPIC_PREFIX": f"{name}.",
        "TICKWHEEL_PARTITIONS": str(PARTITIONS), "TICKWHEEL_APP_ID": name, "TICKWHEEL_HOME": str(home),
        "TICKWHEEL_LOOKAHEAD_MS": str(lookahead_ms), "TICKWHEEL_LOG_LEVEL": "WARNING",
    }
    processors = [
        subprocess.Popen(  # noqa: ASYNC220 - started once per round, not on a hot path
            [sys.executable, "-m", "tickwheel", "processor"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        for _ in range(fleet.processors)
    ]
    workers = start_workers(env, fleet, n, home)
    starts: dict[str, int] = {}
    workers_cpu_s = float("nan")
    try:
        # Far enough ahead that registration and its absorption finish before the window
        # in which the processor may dispatch (T - lookahead).
        instant = now_ms() + lookahead_ms + 15_000 + n // 2
        registration_rate = await _register(settings, n, instant)
        while await committed_count(settings, "job-events") < n:  # noqa: ASYNC110 - polling the broker
            await asyncio.sleep(0.5)
        absorbed_at = now_ms()
        cpu_before = _cpu_seconds(*processors)
        broker_cpu_before = _broker_cpu_seconds(broker_pid)
        workers_cpu_before = _cpu_seconds(*workers)
        if absorbed_at > instant - lookahead_ms:
            say(f"  warning: registration absorbed {absorbed_at - instant + lookahead_ms} ms into the window")
        seen = await collect_run_dues(settings, lambda s: len(s) >= n, timeout_s=n / 500 + 120)
        cpu_s = _cpu_seconds(*processors) - cpu_before
        broker_cpu_s = _broker_cpu_seconds(broker_pid) - broker_cpu_before
        if workers:
            starts = await collect_starts(settings, n, timeout_s=n / 200 + 120)
            workers_cpu_s = _cpu_seconds(*workers) - workers_cpu_before
    finally:
        for proc in (*processors, *workers):
            proc.terminate()
        for proc in (*processors, *workers):
            proc.wait(timeout=30)
    if len(seen) < n:
        raise RuntimeError(f"only {len(seen)} of {n} RunDue committed")
    if workers and len(starts) < n:
        raise RuntimeError(f"only {len(starts)} of {n} runs started by the workers")
    commits = [ts for ts, _ in seen]
    lags = [float(max(0, ts - due.not_before_ms)) for ts, due in seen]
    # The dispatch window: from the first RunDue the processor may emit to the last one.
    first_allowed = instant - lookahead_ms
    span_ms = max(1, max(commits) - max(first_allowed, min(commits)))
    start_lags = [float(max(0, at - instant)) for at in starts.values()] or [float("nan")]
    return {
        "rate": n / (span_ms / 1000),
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": float(max(lags)),
        "start_p50_ms": percentile(start_lags, 0.50),
        "start_p99_ms": percentile(start_lags, 0.99),
        "start_max_ms": float(max(start_lags)),
        "registration_rate": registration_rate,
        "cpu_us_per_run": cpu_s / n * 1e6,
        "worker_cpu_us_per_run": workers_cpu_s / n * 1e6,
        "broker_cpu_us_per_run": broker_cpu_s / n * 1e6,
    }


async def _main_async(
    n: int, rounds: int, lookahead_ms: int, bootstrap: str, fleet: Fleet, broker_pid: int | None
) -> BenchResult:
    workers = fleet.workers
    work = Workload(records=50_000)
    cases: dict[str, Callable[[], Awaitable[dict[str, float]]]] = {
        RAW_LIMIT_LABEL: lambda: raw_txn_produce(bootstrap, work, broker_pid),
        "hot instant, no look-ahead": lambda: hot_round(bootstrap, n, 0, fleet, broker_pid),
        f"hot instant, look-ahead {lookahead_ms // 1000} s": lambda: hot_round(
            bootstrap, n, lookahead_ms, fleet, broker_pid
        ),
    }
    results = await run_rounds_async(cases, rounds)
    limit = results[RAW_LIMIT_LABEL]["rate"].median
    raw_broker = _cpu_cell(results[RAW_LIMIT_LABEL], "broker_us")
    raw_broker = f"{raw_broker} per record" if raw_broker else ""
    rows = [[RAW_LIMIT_LABEL, f"{limit:,.0f}", "1.00", "", "", "", "", "", "", raw_broker, ""]]
    for name, metrics in results.items():
        if name == RAW_LIMIT_LABEL:
            continue
        rate = metrics["rate"].median
        rows.append([
            name, f"{rate:,.0f}", format_ratio(rate / limit if limit else None),
            f"{metrics['lag_p50_ms'].median:,.0f}", f"{metrics['lag_p99_ms'].median:,.0f}",
            f"{metrics['lag_max_ms'].median:,.0f}",
            _start_cell(metrics) if workers else "not measured",
            f"{metrics['cpu_us_per_run'].median:,.0f}",
            f"{metrics['worker_cpu_us_per_run'].median:,.0f}" if workers else "",
            _cpu_cell(metrics, "broker_cpu_us_per_run"),
            f"{metrics['registration_rate'].median:,.0f}",
        ])
    table = format_table(
        ["case", "RunDue/s (median)", "x raw txn limit", "commit lag p50 ms", "commit lag p99 ms",
         "commit lag max ms", "start lag p50/p99/max ms", "processor CPU µs/run", "workers' CPU µs/run",
         "broker CPU µs/run", "register jobs/s"],
        rows,
    )
    return BenchResult(
        name="hot-instant",
        title=f"Hot instant of {n:,} one-time jobs, {PARTITIONS} partitions, "
        + ("one processor process" if fleet.processors == 1 else f"{fleet.processors} processor processes")
        + (f", {workers} worker processes of {fleet.concurrency:,} executions" if workers else ""),
        params={
            "jobs": n, "rounds": rounds, "lookahead_ms": lookahead_ms, "processors": fleet.processors,
            "workers": workers, "worker_concurrency": fleet.concurrency,
        },
        table=table,
        notes=(
            "lag = RunDue commit timestamp - due instant, clamped at 0 (look-ahead commits early);"
            " medians over rounds",
            "processor CPU µs/run = the processors' user+system CPU from registration absorbed to"
            " the last RunDue, per run: its cost, independent of what else loads the machine",
            "workers' CPU µs/run = all workers' CPU from registration absorbed to the last start, per"
            " run (outcome reports overlapping the starts included)",
            "broker CPU µs/run = the broker's CPU over the processor's window, per run (raw row: per"
            " record); blank when the broker is not this run's own (--bootstrap)",
        ),
    )


def _cpu_cell(metrics: dict[str, Any], key: str) -> str:
    stat = metrics.get(key)
    return f"{stat.median:,.1f}" if stat is not None and not math.isnan(stat.median) else ""


def _start_cell(metrics: dict[str, Any]) -> str:
    return "/".join(f"{metrics[k].median:,.0f}" for k in ("start_p50_ms", "start_p99_ms", "start_max_ms"))


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("hot-instant", __doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, help="jobs due at the instant (default 100,000; quick 10,000)")
    parser.add_argument("--lookahead-ms", type=int, default=30_000)
    parser.add_argument("--processors", type=int, default=1, help="processor processes in the group")
    parser.add_argument("--workers", type=int, default=0, help="worker processes: also measure lag to start")
    parser.add_argument(
        "--worker-concurrency", type=int, default=DEFAULT_WORKER_CONCURRENCY,
        help=f"executions in flight per worker (default {DEFAULT_WORKER_CONCURRENCY:,})",
    )
    args = parser.parse_args(argv)
    n = args.jobs or (10_000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 3)
    with bench_broker(args.bootstrap) as broker:
        fleet = Fleet(args.processors, args.workers, args.worker_concurrency)
        result = asyncio.run(_main_async(n, rounds, args.lookahead_ms, broker.bootstrap, fleet, broker.pid))
    emit(result, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
