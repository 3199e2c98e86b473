"""Due-timer lookup cost against the number of stored timers.

Claim under test: *the cost of a scheduler tick does not depend on how many jobs the
partition holds*. For each size N, a RocksDBStore is loaded with N timers due between one
and thirty-one days from now (so none is due, and none enters the one-minute horizon during
the run), then reopened so everything is in SST files as after a restart, and compacted. A tick is what the
processor does every 100 ms: ``wheel.refill(now)`` (one seek at the moving horizon edge) and
``wheel.due(now)``. Also measured: ``store.due(now, 1000)`` on a store that has not yet
learnt where its first timer is, i.e. a real seek from the start of the timer keyspace.

Sizes are interleaved round by round (``bench.common.run_rounds``); each round takes the
median over ``--ticks`` consecutive ticks, and the table shows the median of those and the
range across rounds.

Run: ``.venv/bin/python -m bench.lookup [--sizes 10000,100000,1000000] [--ticks 2000]``.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench.common import (
    BenchError,
    BenchResult,
    Results,
    bench_argparser,
    emit,
    format_spread,
    format_table,
    format_us,
    run_rounds,
    say,
)
from tickwheel.streams.store import RocksDBStore, StoreBatch
from tickwheel.streams.timers import Timer, TimerKind
from tickwheel.streams.wheel import TimingWheel

DAY_MS = 86_400_000
START_MS = 1_800_000_000_000  # a fixed "now" (2027-01-15) so runs are comparable
TICK_MS = 100
LOAD_BATCH = 100_000  # timers per WriteBatch while loading


@dataclass
class Probe:
    """One loaded store, its wheel and its own clock, advanced tick by tick across rounds."""

    size: int
    store: RocksDBStore
    wheel: TimingWheel
    now_ms: int
    load_s: float
    disk_mib: float


def load(path: Path, size: int) -> tuple[float, float]:
    """Write ``size`` timers in large batches, far in the future; seconds taken and MiB on disk."""
    rng = random.Random(size)
    started = time.perf_counter()
    store = RocksDBStore(path)
    try:
        for lo in range(0, size, LOAD_BATCH):
            timers = {
                Timer(START_MS + DAY_MS + rng.randrange(30 * DAY_MS), f"job-{i:08d}", TimerKind.FIRE)
                for i in range(lo, min(lo + LOAD_BATCH, size))
            }
            store.apply(StoreBatch(timers_add=timers))
    finally:
        store.close()
    elapsed = time.perf_counter() - started
    disk = sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 2**20
    return elapsed, disk


def open_probe(root: Path, size: int) -> Probe:
    path = root / f"n{size}"
    say(f"loading {size:,} timers ...")
    load_s, disk = load(path, size)
    store = RocksDBStore(path)  # reopened: the WAL is flushed into SST files, as after a restart
    # Settled, as a long-running store is: without this the largest store is measured while
    # RocksDB still merges its bulk load in background threads that share the two cores.
    store.compact_timers()
    wheel = TimingWheel(store, slot_ms=TICK_MS, horizon_ms=60_000)
    wheel.refill(START_MS)
    return Probe(size, store, wheel, START_MS, load_s, disk)


def measure(probe: Probe, ticks: int) -> dict[str, float]:
    """``ticks`` consecutive ticks: median and p99 of refill+due, and of a cold store.due."""
    tick_ns: list[int] = []
    store_ns: list[int] = []
    # Two loops, not one interleaved: a cold seek through a large store between two ticks
    # evicts the CPU caches the next tick would use, which is the benchmark's doing.
    for _ in range(ticks):
        probe.now_ms += TICK_MS
        t0 = time.perf_counter_ns()
        probe.wheel.refill(probe.now_ms)
        due = probe.wheel.due(probe.now_ms)
        tick_ns.append(time.perf_counter_ns() - t0)
        if due or probe.wheel.size():
            raise BenchError(f"n={probe.size}: expected nothing due at {probe.now_ms}")
    for _ in range(ticks):
        # Forget what earlier scans learnt (no timer below the horizon) so that this call
        # pays the full seek from the start of the keyspace, like a freshly opened store.
        probe.store._floor = b""
        t0 = time.perf_counter_ns()
        cold = probe.store.due(probe.now_ms, 1_000)
        store_ns.append(time.perf_counter_ns() - t0)
        if cold:
            raise BenchError(f"n={probe.size}: expected nothing due at {probe.now_ms}")
    return {
        "tick_us": statistics.median(tick_ns) / 1e3,
        "tick_p99_us": statistics.quantiles(tick_ns, n=100)[98] / 1e3,
        "store_due_us": statistics.median(store_ns) / 1e3,
    }


def table(probes: Sequence[Probe], results: Results) -> str:
    headers = [
        "timers",
        "load s",
        "disk MiB",
        "tick µs (median)",
        "min-max",
        "tick p99 µs",
        "store.due µs (median)",
    ]
    rows = []
    for p in probes:
        r = results[f"{p.size:,}"]
        rows.append(
            [
                f"{p.size:,}",
                f"{p.load_s:.1f}",
                f"{p.disk_mib:.1f}",
                format_us(r["tick_us"].median),
                format_spread(r["tick_us"], format_us),
                format_us(r["tick_p99_us"].median),
                format_us(r["store_due_us"].median),
            ]
        )
    return format_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = bench_argparser("lookup", "Tick cost (wheel refill + due, nothing due) vs stored timers")
    parser.add_argument("--sizes", help="comma-separated timer counts (default 10000,100000,1000000)")
    parser.add_argument("--ticks", type=int, help="ticks per round (default 2000; 200 with --quick)")
    args = parser.parse_args(argv)
    default_sizes = "1000,10000" if args.quick else "10000,100000,1000000"
    sizes = [int(s.replace("_", "")) for s in (args.sizes or default_sizes).split(",")]
    ticks = args.ticks or (200 if args.quick else 2_000)
    rounds = args.rounds or (2 if args.quick else 5)
    root = Path(tempfile.mkdtemp(prefix="tickwheel-lookup-"))
    probes: list[Probe] = []
    try:
        probes = [open_probe(root, n) for n in sizes]
        results = run_rounds({f"{p.size:,}": partial(measure, p, ticks) for p in probes}, rounds)
    finally:
        for p in probes:
            p.store.close()
        shutil.rmtree(root, ignore_errors=True)
    fastest = min(results[f"{p.size:,}"]["tick_us"].median for p in probes)
    slowest = max(results[f"{p.size:,}"]["tick_us"].median for p in probes)
    emit(
        BenchResult(
            "lookup",
            "Scheduler tick with nothing due: TimingWheel.refill(now) + due(now) over RocksDBStore",
            {"rounds": rounds, "ticks/round": ticks, "tick": f"{TICK_MS} ms", "horizon": "60 s"},
            table(probes, results),
            notes=(
                f"slowest / fastest median tick across sizes: {slowest / fastest:.2f}x",
                "timers due 1-31 days ahead, store reopened and its timer index compacted after loading",
                "store.due = a seek from the start of the timer keyspace (nothing learnt), limit 1,000",
            ),
        ),
        args,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
