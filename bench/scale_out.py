"""Scale-out: one vs two processor processes over the same partitions, on a hot instant.

Each round writes N one-time jobs due at one instant T straight to ``sched-changelog`` of
an 8-partition app (``bench.synth``), starts one or two processor subprocesses in the same
group (the range assignor splits the partitions between them), and reads every committed
RunDue. T is far enough ahead that the processes have restored and the group has settled
(checked from their logs). Look-ahead is 0, so all dispatch happens at or after T.

Measured: RunDue/s of the whole app (N / (last commit - T)) and of each process (its
partitions' RunDue over its own span), and the two-process / one-process ratio. On this
2-core machine the broker shares the cores with both processes: the ratio shows how much a
second process buys when CPU, not the design, is the limit.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from bench.common import (
    RAW_LIMIT_LABEL,
    BenchResult,
    Workload,
    bench_argparser,
    bench_broker,
    emit,
    format_ratio,
    format_table,
    raw_txn_produce,
    run_rounds_async,
    say,
)
from bench.recovery import parse_transitions
from bench.synth import (
    bench_settings,
    collect_run_dues,
    now_ms,
    partition_of,
    start_processor,
    synth_states,
    write_changelog,
)
from tickwheel.topics import create_topics

PARTITIONS = 8
SETTLE_MS = 45_000  # restore + group joins (a second member triggers a rebalance) before T


def owners(logs: list[Path]) -> dict[int, int]:
    """partition -> index of the process that last moved it to RUNNING."""
    last: dict[int, tuple[int, int]] = {}
    for index, path in enumerate(logs):
        for t in parse_transitions(path.read_text()):
            if t.target == "running" and (t.partition not in last or t.at_ms >= last[t.partition][0]):
                last[t.partition] = (t.at_ms, index)
    return {p: index for p, (_, index) in last.items()}


async def scale_round(bootstrap: str, jobs: int, processes: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="tw-scale-"))
    name = f"so{os.getpid()}x{now_ms() % 10_000_000}"
    settings = bench_settings(
        bootstrap, name, home, PARTITIONS, lookahead_ms=0, misfire_tolerance_ms=3_600_000
    )
    logs = [home / f"processor-{i}.log" for i in range(processes)]
    try:
        await create_topics(settings)
        start = now_ms()
        instant = start + SETTLE_MS + jobs // 20
        report = await write_changelog(settings, synth_states(jobs, lambda _i: instant, start))
        say(
            f"  synth: {report.records:,} states in {report.seconds:.1f} s;"
            f" T in {(instant - now_ms()) / 1000:.0f} s"
        )
        procs = []
        for i in range(processes):
            # Each process its own state dir, as on separate machines.
            own = bench_settings(
                bootstrap, name, home / f"p{i}", PARTITIONS, lookahead_ms=0, misfire_tolerance_ms=3_600_000
            )
            with logs[i].open("wb") as log:
                procs.append(start_processor(own, log))
        try:
            seen = await collect_run_dues(
                settings, lambda s: len(s) >= jobs, (instant - now_ms()) / 1000 + 300
            )
        finally:
            for proc in procs:
                os.kill(proc.pid, signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=60)
        owner = owners(logs)
        settled = max(
            (t.at_ms for path in logs for t in parse_transitions(path.read_text()) if t.target == "running"),
            default=0,
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    if len(seen) < jobs:
        raise RuntimeError(f"only {len(seen)} of {jobs} RunDue committed")
    if settled > instant:
        say(f"  warning: a partition changed hands {settled - instant} ms after T")
    commits = [ts for ts, _ in seen]
    metrics = {"rate": jobs / max(0.001, (max(commits) - instant) / 1000)}
    for i in range(processes):
        mine = [ts for ts, d in seen if owner.get(partition_of(d.job_id.encode(), PARTITIONS)) == i]
        span = (max(mine) - instant) / 1000 if mine else 0.0
        metrics[f"p{i}_rate"] = len(mine) / span if span > 0 else 0.0
        metrics[f"p{i}_jobs"] = float(len(mine))
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("scale-out", __doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, help="jobs due at the instant (default 50,000; quick 10,000)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (10_000 if args.quick else 50_000)
    rounds = args.rounds or (1 if args.quick else 2)
    with bench_broker(args.bootstrap) as broker:
        results = asyncio.run(
            run_rounds_async(
                {
                    RAW_LIMIT_LABEL: lambda: raw_txn_produce(broker.bootstrap, Workload(50_000)),
                    "one process": lambda: scale_round(broker.bootstrap, jobs, 1),
                    "two processes": lambda: scale_round(broker.bootstrap, jobs, 2),
                },
                rounds,
            )
        )
    one = results["one process"]["rate"].median
    limit = results[RAW_LIMIT_LABEL]["rate"].median
    rows = []
    for label, m in results.items():
        rate = m["rate"].median
        per = ", ".join(
            f"{m[f'p{i}_rate'].median:,.0f}/s ({m[f'p{i}_jobs'].median:,.0f} jobs)"
            for i in range(2)
            if f"p{i}_rate" in m
        )
        ratios = [format_ratio(rate / one if one else None), format_ratio(rate / limit if limit else None)]
        rows.append([label, f"{rate:,.0f}", *ratios, per])
    emit(
        BenchResult(
            name="scale-out",
            title=f"Hot instant of {jobs:,} jobs over {PARTITIONS} partitions: one vs two processors",
            params={"jobs": jobs, "partitions": PARTITIONS, "rounds": rounds, "lookahead_ms": 0},
            table=format_table(
                ["case", "RunDue/s (median)", "x one process", "x raw txn limit", "per process"], rows
            ),
            notes=(
                "rate = N / (last RunDue commit - T); per process: its partitions' RunDue over its own span",
            ),
        ),
        args,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
