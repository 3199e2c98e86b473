"""Footprint: processor memory and bytes per job in Kafka and in RocksDB.

N one-time jobs (due 1-30 days out) are written to ``sched-changelog`` with ``bench.synth``;
one processor subprocess restores all of them on an empty disk and then idles. Measured:

* processor RSS (``VmRSS`` of ``/proc/<pid>/status``) once every partition runs, and its
  peak (``VmHWM``), which includes the restore;
* Kafka: the ``sched-changelog`` partitions' segment files in the broker's log directory,
  per job, and the sum of key + value sizes (the payload before batch overhead);
* RocksDB: the state directory's files after a clean shutdown (memtables flushed), per job.
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
from bench.recovery import PARTITIONS, far_due, submit_probe, wait_probe
from bench.synth import bench_settings, du_bytes, now_ms, start_processor, synth_states, write_changelog
from tickwheel.topics import create_topics


def _status_kib(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def broker_data_dir(pid: int | None) -> Path | None:
    """The broker's ``log.dirs`` (``<home>/broker/data``), found from its command line."""
    if pid is None:
        return None
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    for arg in args:
        if arg.endswith(b"server.properties"):
            return Path(arg.decode()).parent / "data"
    return None


def topic_bytes(data_dir: Path | None, topic: str, partitions: int) -> int:
    if data_dir is None:
        return 0
    # Only the segments: index files are preallocated (10 MiB each) and say nothing per job.
    return sum(f.stat().st_size for p in range(partitions) for f in (data_dir / f"{topic}-{p}").glob("*.log"))


async def footprint_round(bootstrap: str, broker_pid: int | None, jobs: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix="tw-footprint-"))
    name = f"fp{os.getpid()}x{now_ms() % 10_000_000}"
    settings = bench_settings(bootstrap, name, home, PARTITIONS, misfire_tolerance_ms=3_600_000)
    try:
        await create_topics(settings)
        start = now_ms()
        report = await write_changelog(settings, synth_states(jobs, far_due(start), start))
        say(f"  synth: {report.records:,} states in {report.seconds:.1f} s ({report.rate:,.0f}/s)")
        await submit_probe(settings, "probe-fp", now_ms())
        with (home / "processor.log").open("wb") as log:
            proc = start_processor(settings, log)
        try:
            await wait_probe(settings, "probe-fp", 120 + jobs / 5_000)
            await asyncio.sleep(3)  # let the step after the probe settle
            rss = _status_kib(proc.pid, "VmRSS")
            hwm = _status_kib(proc.pid, "VmHWM")
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        rocks = du_bytes(settings.state_dir)
        kafka = topic_bytes(broker_data_dir(broker_pid), settings.topic("sched-changelog"), PARTITIONS)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return {
        "rss_mib": rss / 1024,
        "peak_rss_mib": hwm / 1024,
        "kafka_b_per_job": kafka / jobs,
        "payload_b_per_job": report.value_bytes / jobs,
        "rocksdb_b_per_job": rocks / jobs,
        "kafka_mib": kafka / 2**20,
        "rocksdb_mib": rocks / 2**20,
    }


def main(argv: list[str] | None = None) -> int:
    parser = bench_argparser("footprint", __doc__.splitlines()[0])
    parser.add_argument(
        "--jobs", type=int, help="jobs (default 1,000,000; quick 50,000; 10,000,000 for the big case)"
    )
    args = parser.parse_args(argv)
    jobs = args.jobs or (50_000 if args.quick else 1_000_000)
    rounds = args.rounds or 1
    with bench_broker(args.bootstrap) as broker:
        results = asyncio.run(
            run_rounds_async(
                {"footprint": lambda: footprint_round(broker.bootstrap, broker.pid, jobs)}, rounds
            )
        )
    m = results["footprint"]
    table = format_table(
        [
            "jobs",
            "RSS MiB",
            "peak RSS MiB",
            "changelog on disk MiB",
            "Kafka B/job",
            "payload B/job",
            "RocksDB MiB",
            "RocksDB B/job",
        ],
        [
            [
                f"{jobs:,}",
                f"{m['rss_mib'].median:,.0f}",
                f"{m['peak_rss_mib'].median:,.0f}",
                f"{m['kafka_mib'].median:,.1f}",
                f"{m['kafka_b_per_job'].median:,.0f}",
                f"{m['payload_b_per_job'].median:,.0f}",
                f"{m['rocksdb_mib'].median:,.1f}",
                f"{m['rocksdb_b_per_job'].median:,.0f}",
            ]
        ],
    )
    emit(
        BenchResult(
            name="footprint",
            title=f"Processor memory and storage per job, {PARTITIONS} partitions, one processor process",
            params={"jobs": jobs, "rounds": rounds},
            table=table,
            notes=(
                "Kafka: sched-changelog segment files (one record per job: nothing to compact)",
                "payload: key + value bytes per record; RocksDB: state dir after a clean shutdown",
                "target: RSS <= 512 MiB at 10,000,000 jobs",
            ),
        ),
        args,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
