"""Steady lag: a processor holding N jobs, with a steady stream of them falling due.

Each round writes N - M one-time jobs due 1-30 days out straight to ``sched-changelog``
(``bench.synth``), starts one processor subprocess on an empty disk and waits until it
dispatches a probe (restore done). It then registers M more one-time jobs through the
client library, due one after another at ``--rate`` per second from an instant T0 far
enough ahead that their absorption is over, and reads every committed RunDue:

* lag to commit = RunDue record timestamp (set at append, just before the commit) - the
  job's due instant, p50/p99/max over the M jobs;
* lag to worker start = the first RunStarted's ``at_ms`` of each run (``--workers K``
  worker processes of pool default, no-op executor; 0 skips it) - the due instant;
* the achieved dispatch rate over the window.

Look-ahead is 0 by default, so every RunDue is decided at or after its instant and the lag
is the processor's own (tick, decide, commit); with look-ahead the RunDue commits early.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from bench.common import BenchResult, bench_argparser, bench_broker, emit, format_table, run_rounds_async, say
from bench.hot_instant import Fleet, collect_starts, start_workers
from bench.recovery import PARTITIONS, far_due, submit_probe, wait_probe
from bench.synth import (
    bench_settings,
    collect_run_dues,
    committed_count,
    now_ms,
    percentile,
    processor_env,
    start_processor,
    synth_states,
    write_changelog,
)
from tickwheel.client import CommandClient
from tickwheel.schemas.model import CommandMeta, CreateJob, ExecutorSpec, JobSpec, OneTime, RunDue
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

CHUNK = 5_000
SLICE_MS = 10_000


async def register_stream(settings: Settings, m: int, t0: int, rate: float) -> None:
    """M one-time jobs, job i due at t0 + i / rate."""
    async with CommandClient(settings, principal="bench") as client:
        for first in range(0, m, CHUNK):
            commands = [
                CreateJob(
                    CommandMeta(f"c-st-{i}", f"steady-{i:07d}", now_ms(), "bench"),
                    JobSpec(
                        team="bench",
                        name="steady",
                        schedule=OneTime(t0 + int(i * 1000 / rate)),
                        executor=ExecutorSpec("noop"),
                    ),
                )
                for i in range(first, min(m, first + CHUNK))
            ]
            await client.submit_many(commands)  # type: ignore[arg-type]


async def steady_round(
    bootstrap: str, jobs: int, rate: float, window_s: float, lookahead_ms: int, workers: int = 1
) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="tw-steady-"))
    name = f"st{os.getpid()}x{now_ms() % 10_000_000}"
    settings = bench_settings(
        bootstrap, name, home, PARTITIONS, lookahead_ms=lookahead_ms, misfire_tolerance_ms=3_600_000
    )
    m = int(rate * window_s)
    try:
        await create_topics(settings)
        start = now_ms()
        report = await write_changelog(settings, synth_states(max(0, jobs - m), far_due(start), start))
        say(f"  synth: {report.records:,} states in {report.seconds:.1f} s ({report.rate:,.0f}/s)")
        await submit_probe(settings, "probe-steady", now_ms())
        with (home / "processor.log").open("wb") as log:
            proc = start_processor(settings, log)
        fleet = start_workers(processor_env(settings, "WARNING"), Fleet(workers=workers), m, home)
        starts: dict[str, int] = {}
        try:
            await wait_probe(settings, "probe-steady", 120 + jobs / 5_000)
            say("  restored; registering the stream")
            # Registration of M jobs takes M / (a few thousand per s) to absorb; start after it.
            t0 = now_ms() + 10_000 + int(m / 2)
            await register_stream(settings, m, t0, rate)
            while await committed_count(settings, "job-events") < m:  # noqa: ASYNC110 - broker poll
                await asyncio.sleep(0.5)
            if now_ms() > t0:
                say(f"  warning: absorption ended {now_ms() - t0} ms into the window")
            seen = await collect_run_dues(
                # The stream's M RunDue plus the probe's.
                settings,
                lambda s: len(s) >= m + 1,
                (t0 - now_ms()) / 1000 + window_s + 120,
            )
            if workers:
                starts = await collect_starts(settings, m + 1, timeout_s=120)
        finally:
            for child in (proc, *fleet):
                os.kill(child.pid, signal.SIGTERM)
            for child in (proc, *fleet):
                child.wait(timeout=60)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    stream = [(ts, d) for ts, d in seen if d.job_id.startswith("steady-")]
    if len(stream) < m:
        raise RuntimeError(f"only {len(stream)} of {m} RunDue committed")
    lags = [float(max(0, ts - d.scheduled_for_ms)) for ts, d in stream]
    commits = [ts for ts, _ in stream]
    start_lags = [
        float(max(0, starts[d.run_id] - d.scheduled_for_ms)) for _, d in stream if d.run_id in starts
    ]
    if workers and len(start_lags) < m:
        raise RuntimeError(f"only {len(start_lags)} of {m} runs started by the workers")
    start_lags = start_lags or [float("nan")]
    return {
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags),
        "start_p50_ms": percentile(start_lags, 0.50),
        "start_p99_ms": percentile(start_lags, 0.99),
        "start_max_ms": max(start_lags),
        "rate": len(stream) / max(0.001, (max(commits) - min(commits)) / 1000),
        **slice_p99(stream, t0),
    }


def slice_p99(stream: list[tuple[int, RunDue]], t0: int, slice_ms: int = SLICE_MS) -> dict[str, float]:
    """Lag p99 per slice of due instants: tells a steady tail from a passing stall."""
    slices: dict[int, list[float]] = {}
    for ts, due in stream:
        slices.setdefault((due.scheduled_for_ms - t0) // slice_ms, []).append(
            float(max(0, ts - due.scheduled_for_ms))
        )
    return {f"slice_{k:02d}_p99_ms": percentile(v, 0.99) for k, v in sorted(slices.items())}


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("steady", __doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, help="jobs held (default 1,000,000; quick 50,000)")
    parser.add_argument("--rate", type=float, default=1_000.0, help="jobs falling due per second")
    parser.add_argument("--window-s", type=float, help="seconds of steady due stream (default 60; quick 15)")
    parser.add_argument("--lookahead-ms", type=int, default=0)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes for the lag to start (0: none)"
    )
    args = parser.parse_args(argv)
    jobs = args.jobs or (50_000 if args.quick else 1_000_000)
    window = args.window_s or (15.0 if args.quick else 60.0)
    rounds = args.rounds or 1
    with bench_broker(args.bootstrap) as broker:
        results = asyncio.run(
            run_rounds_async(
                {
                    "steady": lambda: steady_round(
                        broker.bootstrap, jobs, args.rate, window, args.lookahead_ms, args.workers
                    )
                },
                rounds,
            )
        )
    m = results["steady"]
    table = format_table(
        [
            "jobs held",
            "due rate /s",
            "window s",
            "RunDue/s",
            "lag p50 ms",
            "lag p99 ms",
            "lag max ms",
            "target p99 ms",
            "start lag p50/p99/max ms",
        ],
        [
            [
                f"{jobs:,}",
                f"{args.rate:,.0f}",
                f"{window:.0f}",
                f"{m['rate'].median:,.0f}",
                f"{m['lag_p50_ms'].median:,.0f}",
                f"{m['lag_p99_ms'].median:,.0f}",
                f"{m['lag_max_ms'].median:,.0f}",
                "250",
                "/".join(f"{m[k].median:,.0f}" for k in ("start_p50_ms", "start_p99_ms", "start_max_ms"))
                if args.workers
                else "not measured",
            ]
        ],
    )
    emit(
        BenchResult(
            name="steady",
            title=f"Steady due stream through one processor process, {PARTITIONS} partitions"
            + (f", {args.workers} worker process{'es' if args.workers > 1 else ''}" if args.workers else ""),
            params={
                "jobs": jobs,
                "rate": args.rate,
                "window_s": window,
                "lookahead_ms": args.lookahead_ms,
                "workers": args.workers,
                "rounds": rounds,
            },
            table=table,
            notes=(
                "lag = RunDue commit timestamp - due instant, clamped at 0; tick_ms 100",
                "start lag = first RunStarted at_ms - due instant, clamped at 0 (no-op executor)",
                "lag p99 per 10 s of due instants: "
                + ", ".join(f"{m[k].median:,.0f}" for k in sorted(m) if k.startswith("slice_")),
            ),
        ),
        args,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
