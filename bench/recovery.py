"""Recovery: how long a processor owning N jobs takes to dispatch again after it dies.

Each round writes N one-time jobs (due 1-30 days out, so none fires) straight to
``sched-changelog`` with ``bench.synth`` and then measures two recoveries of one processor
subprocess owning every partition:

* **from the changelog**: an empty state directory, so every partition replays its
  changelog into RocksDB before it may step;
* **with the local store**: SIGKILL of that processor once it runs, then a restart on the
  same directory; each store resumes from its stored changelog offset.

Dispatch has resumed when a probe (a one-time job due at the moment of the kill or start,
submitted through ``commands``) gets its RunDue committed: the probe's commit timestamp
minus the start of the process. "restore" is the longest partition's RESTORING -> RUNNING
span, read from the processor's own log. The processor runs with static group membership
(``TICKWHEEL_PROCESSOR_INSTANCE_ID``): without it a restarted consumer waits for the group
coordinator to expel the dead member (session timeout 10 s) before it gets its partitions;
the table shows that wait as "to assignment".
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.common import BenchResult, bench_argparser, bench_broker, emit, format_table, run_rounds_async, say
from bench.synth import (
    bench_settings,
    collect_run_dues,
    now_ms,
    start_processor,
    synth_states,
    write_changelog,
)
from tickwheel.client import CommandClient
from tickwheel.schemas.model import CommandMeta, CreateJob, ExecutorSpec, JobSpec, OneTime
from tickwheel.settings import Settings
from tickwheel.topics import create_topics

PARTITIONS = 4
DAY_MS = 86_400_000
HOUR_MS = 3_600_000


def far_due(start_ms: int, seed: int = 7) -> Callable[[int], int]:
    """Due instants 1-30 days out on the hour: nothing fires during the run.

    Hourly instants keep the distinct specs (one core step and one spec encoding each) at
    720, so the generator runs at the encoder's speed, not the core's.
    """
    rng = random.Random(seed)
    return lambda _i: start_ms + DAY_MS + rng.randrange(30 * 24) * HOUR_MS


@dataclass(frozen=True, slots=True)
class Transition:
    partition: int
    target: str
    at_ms: int


def parse_transitions(log_text: str) -> list[Transition]:
    """``task p: a -> b`` lines of the processor's JSON log, with their wall-clock ms."""
    found: list[Transition] = []
    for line in log_text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        msg = str(entry.get("msg", ""))
        if not msg.startswith("task ") or " -> " not in msg:
            continue
        head, _, target = msg.partition(" -> ")
        stamp = datetime.strptime(entry["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        found.append(
            Transition(int(head.split()[1].rstrip(":")), target.strip(), int(stamp.timestamp() * 1000))
        )
    return found


def restore_span_ms(transitions: list[Transition]) -> tuple[int, int]:
    """(first RESTORING, last RUNNING) wall-clock ms of the last restore of every partition."""
    restoring: dict[int, int] = {}
    running: dict[int, int] = {}
    for t in transitions:
        if t.target == "restoring":
            restoring[t.partition] = t.at_ms
        elif t.target == "running":
            running[t.partition] = t.at_ms
    if not restoring or not running:
        return 0, 0
    return min(restoring.values()), max(running.values())


async def submit_probe(settings: Settings, job_id: str, at_ms: int) -> None:
    spec = JobSpec(team="bench", name="probe", schedule=OneTime(at_ms), executor=ExecutorSpec("noop"))
    async with CommandClient(settings, principal="bench") as client:
        await client.submit(CreateJob(CommandMeta(f"c-{job_id}", job_id, now_ms(), "bench"), spec))


async def wait_probe(settings: Settings, job_id: str, timeout_s: float) -> int:
    """Commit timestamp of the probe's RunDue."""
    seen = await collect_run_dues(settings, lambda s: any(d.job_id == job_id for _, d in s), timeout_s)
    for ts, due in seen:
        if due.job_id == job_id:
            return ts
    raise RuntimeError(f"probe {job_id} not dispatched within {timeout_s:.0f} s")


async def recover(
    settings: Settings, log_path: Path, probe: str, origin_ms: int, timeout_s: float
) -> dict[str, float]:
    """Start a processor, wait for the probe's RunDue; times relative to ``origin_ms``."""
    with log_path.open("ab") as log:
        offset = log.tell()
        spawned = now_ms()
        proc = start_processor(settings, log)
    try:
        committed = await wait_probe(settings, probe, timeout_s)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    text = log_path.read_text()[offset:]  # noqa: ASYNC240 - one small log, once per recovery
    first, last = restore_span_ms(parse_transitions(text))
    return {
        "dispatch_s": (committed - origin_ms) / 1000,
        "from_spawn_s": (committed - spawned) / 1000,
        "to_assignment_s": (first - spawned) / 1000 if first else float("nan"),
        "restore_s": (last - first) / 1000 if first else float("nan"),
        "pid": float(proc.pid),
    }


async def recovery_round(bootstrap: str, jobs: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="tw-recovery-"))
    name = f"rec{os.getpid()}x{now_ms() % 10_000_000}"
    # A probe due at the kill must still fire after a slow restore, not count as missed.
    # Static membership (as operations.md recommends): the restarted process takes its old
    # member's place at once instead of waiting out the session timeout.
    settings = bench_settings(
        bootstrap, name, home, PARTITIONS, misfire_tolerance_ms=3_600_000, processor_instance_id=f"{name}-0"
    )
    log_path = home / "processor.log"
    timeout_s = 120 + jobs / 5_000
    try:
        await create_topics(settings)
        start = now_ms()
        report = await write_changelog(settings, synth_states(jobs, far_due(start), start))
        say(f"  synth: {report.records:,} states in {report.seconds:.1f} s ({report.rate:,.0f}/s)")
        # (a) from the changelog on an empty disk
        origin = now_ms()
        await submit_probe(settings, "probe-cold", origin)
        cold = await recover(settings, log_path, "probe-cold", origin, timeout_s)
        # (b) SIGKILL, restart with the local store intact
        os.kill(int(cold["pid"]), signal.SIGKILL)
        killed = now_ms()
        await asyncio.sleep(0.2)
        await submit_probe(settings, "probe-warm", killed)
        warm = await recover(settings, log_path, "probe-warm", killed, timeout_s)
        os.kill(int(warm["pid"]), signal.SIGTERM)
        await asyncio.sleep(2)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {
        "synth_rate": report.rate,
        **{f"cold_{k}": v for k, v in cold.items() if k != "pid"},
        **{f"warm_{k}": v for k, v in warm.items() if k != "pid"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("recovery", __doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, help="jobs owned by the processor (default 1,000,000; quick 50,000)"
    )
    args = parser.parse_args(argv)
    jobs = args.jobs or (50_000 if args.quick else 1_000_000)
    rounds = args.rounds or (1 if args.quick else 2)
    with bench_broker(args.bootstrap) as broker:
        results = asyncio.run(
            run_rounds_async({"recovery": lambda: recovery_round(broker.bootstrap, jobs)}, rounds)
        )
    m = results["recovery"]
    rows = []
    for label, key in (
        ("from the changelog (empty disk)", "cold"),
        ("with the local store (after SIGKILL)", "warm"),
    ):
        rows.append(
            [
                label,
                f"{m[f'{key}_dispatch_s'].median:.1f}",
                f"{m[f'{key}_from_spawn_s'].median:.1f}",
                f"{m[f'{key}_to_assignment_s'].median:.1f}",
                f"{m[f'{key}_restore_s'].median:.1f}",
                "30" if key == "cold" else "5",
            ]
        )
    table = format_table(
        [
            "recovery",
            "to dispatch s",
            "from process start s",
            "start to assignment s",
            "restore s",
            "target s",
        ],
        rows,
    )
    emit(
        BenchResult(
            name="recovery",
            title=f"Recovery of one processor owning {jobs:,} jobs, {PARTITIONS} partitions",
            params={"jobs": jobs, "rounds": rounds},
            table=table,
            notes=(
                "to dispatch: probe RunDue commit - (kill, or start of the cold run); medians over rounds",
                "restore: first RESTORING to last RUNNING transition in the processor's log",
                f"synthetic changelog written at {m['synth_rate'].median:,.0f} states/s",
            ),
        ),
        args,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
