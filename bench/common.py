"""The shared benchmark harness: a private broker, interleaved rounds, tables and reports.

Every benchmark in ``bench/`` is a module with ``main(argv) -> int`` built from these parts:

* ``bench_broker(existing)``: a context manager yielding a :class:`BenchBroker`. It starts
  a private Kafka broker on free ports in a temporary directory (never 9092: other people
  run brokers on this machine) and removes it afterwards; ``existing`` reuses a running one.
* ``run_rounds`` / ``run_rounds_async``: run every case once per round, cases interleaved
  and rotated each round, so slow drift of a shared machine hits all cases alike; each case
  returns named metrics and the result is a :class:`Stats` (median, min, max) per metric.
* ``raw_txn_produce``: one round of the **raw transactional produce limit**, the fastest
  way aiokafka writes transactionally here. Benchmarks run it as a case beside their own,
  so their ratios are against the same run's limit on the same noisy machine.
* ``format_table``, ``BenchResult``, ``emit``: a Markdown table on stdout (or JSON with
  ``--json``), appended by ``append_report`` to ``bench/README.md`` as a dated section with
  the machine (CPUs, CPU model, memory) and the git commit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tickwheel.localbroker import BrokerConfig, LocalBroker, free_port

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
README = BENCH_DIR / "README.md"

RECORD_SIZE = 200  # bytes of value per record: about one encoded RunDue
TXN_SIZE = 1_000  # records per transaction: about one processor step of a hot instant
AIOKAFKA_DEFAULT_BATCH = 16 * 1024  # aiokafka's own max_batch_size default
# Large enough for one whole transaction of ~220-byte records in a single batch, and safely
# below the broker's 1 MiB message.max.bytes.
LARGE_BATCH = 512 * 1024
RAW_LIMIT_LABEL = "raw txn limit"

Metrics = Mapping[str, float]
Api = Literal["send", "batch"]


class BenchError(Exception):
    """A benchmark could not run or its output failed verification; the message says why."""


def say(message: str) -> None:
    """Progress for the person watching; stdout stays reserved for the table or JSON."""
    print(message, file=sys.stderr, flush=True)


# -- statistics over rounds -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stats:
    """One metric over several rounds."""

    median: float
    low: float
    high: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        if not samples:
            raise ValueError("no samples")
        return cls(statistics.median(samples), min(samples), max(samples), tuple(samples))

    def as_json(self) -> dict[str, object]:
        return {"median": self.median, "min": self.low, "max": self.high, "samples": list(self.samples)}


Results = dict[str, dict[str, Stats]]


def schedule(names: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """(round, case) in run order: every case once per round, the order rotated each round.

    Rotation keeps any case from always following the same neighbour (whose leftovers,
    such as broker log flushes or GC, it would otherwise always pay for).
    """
    order: list[tuple[int, str]] = []
    for r in range(rounds):
        shift = r % len(names) if names else 0
        order.extend((r, name) for name in [*names[shift:], *names[:shift]])
    return order


class _Collector:
    def __init__(self, names: Sequence[str], rounds: int, log: Callable[[str], None]) -> None:
        self.rounds = rounds
        self.log = log
        self.samples: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in names}

    def add(self, r: int, name: str, metrics: Metrics) -> None:
        for key, value in metrics.items():
            self.samples[name][key].append(value)
        shown = ", ".join(f"{key} {value:,.1f}" for key, value in metrics.items())
        self.log(f"round {r + 1}/{self.rounds} {name}: {shown}")

    def result(self) -> Results:
        return {
            name: {key: Stats.of(values) for key, values in metrics.items()}
            for name, metrics in self.samples.items()
        }


def run_rounds(
    cases: Mapping[str, Callable[[], Metrics]], rounds: int, *, log: Callable[[str], None] = say
) -> Results:
    """Run each case ``rounds`` times, interleaved; the statistics of each metric per case."""
    collector = _Collector(list(cases), rounds, log)
    for r, name in schedule(list(cases), rounds):
        collector.add(r, name, cases[name]())
    return collector.result()


async def run_rounds_async(
    cases: Mapping[str, Callable[[], Awaitable[Metrics]]],
    rounds: int,
    *,
    log: Callable[[str], None] = say,
) -> Results:
    """:func:`run_rounds` for cases that are coroutines on one running event loop."""
    collector = _Collector(list(cases), rounds, log)
    for r, name in schedule(list(cases), rounds):
        collector.add(r, name, await cases[name]())
    return collector.result()


def results_json(results: Results) -> dict[str, dict[str, dict[str, object]]]:
    return {name: {key: s.as_json() for key, s in metrics.items()} for name, metrics in results.items()}


# -- throughput and CPU ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mark:
    """Wall clock and CPU time (this process, and the broker when known) at one instant."""

    wall: float
    client_cpu: float
    broker_cpu: float | None

    @classmethod
    def now(cls, broker_pid: int | None) -> Mark:
        broker = proc_cpu_seconds(broker_pid) if broker_pid is not None else None
        return cls(time.perf_counter(), time.process_time(), broker)


def throughput(records: int, start: Mark, end: Mark) -> dict[str, float]:
    """records/s, and CPU microseconds per record spent by the client and by the broker.

    On a 2-core machine shared by client and broker, CPU per record says more about
    headroom than the rate alone: whatever the client burns, the processor cannot use.
    """
    metrics = {
        "rate": records / (end.wall - start.wall),
        "client_us": (end.client_cpu - start.client_cpu) / records * 1e6,
    }
    if start.broker_cpu is not None and end.broker_cpu is not None:
        metrics["broker_us"] = (end.broker_cpu - start.broker_cpu) / records * 1e6
    return metrics


def parse_proc_stat_cpu(stat: str, ticks_per_second: int) -> float:
    """User plus system CPU seconds from the text of ``/proc/<pid>/stat``."""
    fields = stat.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / ticks_per_second  # utime, stime


def proc_cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return parse_proc_stat_cpu(stat, os.sysconf("SC_CLK_TCK"))


# -- formatting -----------------------------------------------------------------------


def ratio(value: float, reference: float) -> float | None:
    """value / reference, or None when there is no meaningful reference."""
    if reference <= 0 or math.isnan(reference):
        return None
    return value / reference


def format_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def format_rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def format_us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def format_spread(stats: Stats, fmt: Callable[[float | None], str] = format_rate) -> str:
    """``min-max`` of a metric, so a reader sees how noisy its median is."""
    return f"{fmt(stats.low)}-{fmt(stats.high)}"


def _is_number(cell: str) -> bool:
    """A number, a ratio (``0.52x``) or a range of positive numbers (``1,200-1,400``)."""
    for part in cell.strip().rstrip("x%").replace(",", "").split("-"):
        try:
            float(part)
        except ValueError:
            return False
    return True


def _right_aligned(cells: Sequence[str]) -> bool:
    """Numbers read best right-aligned; a column of numbers may say "n/a" for "none"."""
    return any(_is_number(c) for c in cells) and all(_is_number(c) or c.strip() == "n/a" for c in cells)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A padded Markdown table; columns whose cells are all numbers are right-aligned."""
    if any(len(row) != len(headers) for row in rows):
        raise ValueError("every row needs one cell per header")
    columns = list(zip(headers, *rows, strict=True))
    widths = [max(3, *(len(cell) for cell in column)) for column in columns]
    right = [_right_aligned(column[1:]) for column in columns]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(w) if r else cell.ljust(w) for cell, w, r in zip(cells, widths, right, strict=True)
        )
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w - 1) + ":" if r else "-" * w for w, r in zip(widths, right, strict=True)]
    return "\n".join([line(headers), line(rule), *(line(row) for row in rows)])


# -- machine and report ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MachineInfo:
    cpus: int
    cpu_model: str
    mem_total_kib: int
    python: str
    commit: str
    # The 1-minute load average when the results were printed: on a machine shared with
    # other people it tells a reader how much to trust the spread of the rounds.
    load: float = 0.0

    def describe(self) -> str:
        gib = self.mem_total_kib / (1024 * 1024)
        return (
            f"{self.cpus} CPUs ({self.cpu_model}), {gib:.1f} GiB RAM, Python {self.python}, "
            f"load average {self.load:.1f}"
        )


def parse_cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` in ``/proc/cpuinfo`` text ("unknown" if there is none)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in {"model name", "Model"} and value.strip():
            return value.strip()
    return "unknown"


def parse_mem_total_kib(meminfo: str) -> int:
    """``MemTotal`` in KiB from ``/proc/meminfo`` text (0 if absent)."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    return 0


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def git_commit(repo: Path = REPO_ROOT) -> str:
    """The short HEAD commit, marked when the working tree differs from it."""
    git = shutil.which("git")
    if git is None:
        return "unknown"
    head = subprocess.run(
        [git, "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    if head.returncode != 0:
        return "unknown"
    # --no-optional-locks: reading the status must not rewrite the index under other people.
    status = subprocess.run(
        [git, "--no-optional-locks", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True, text=True, check=False,
    )
    dirty = " (with uncommitted changes)" if status.stdout.strip() else ""
    return head.stdout.strip() + dirty


def machine_info() -> MachineInfo:
    return MachineInfo(
        cpus=len(os.sched_getaffinity(0)),  # what `nproc` prints
        cpu_model=parse_cpu_model(_read("/proc/cpuinfo")),
        mem_total_kib=parse_mem_total_kib(_read("/proc/meminfo")),
        python=platform.python_version(),
        commit=git_commit(),
        load=os.getloadavg()[0],
    )


def format_section(name: str, body: str, machine: MachineInfo, when: datetime) -> str:
    """One dated README section: heading, machine, commit, then the benchmark's own text."""
    stamp = when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"\n## `{name}` — {stamp}\n\n"
        f"- machine: {machine.describe()}\n"
        f"- commit: {machine.commit}\n\n"
        f"{body.strip()}\n"
    )


def append_report(
    name: str,
    table_text: str,
    *,
    readme: Path = README,
    when: datetime | None = None,
    machine: MachineInfo | None = None,
) -> Path:
    """Append a dated section with ``table_text`` to ``bench/README.md``; returns the path."""
    section = format_section(name, table_text, machine or machine_info(), when or datetime.now(UTC))
    with readme.open("a", encoding="utf-8") as out:
        out.write(section)
    return readme


# -- broker and topics ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchBroker:
    bootstrap: str
    pid: int | None  # None when reusing a broker this run did not start


@contextlib.contextmanager
def bench_broker(existing: str | None = None, *, heap: str = "1g") -> Iterator[BenchBroker]:
    """A private broker on free ports in a temporary directory, removed afterwards."""
    if existing:
        yield BenchBroker(existing, None)
        return
    home = Path(tempfile.mkdtemp(prefix="tickwheel-bench-"))
    broker = LocalBroker(BrokerConfig(home=home, port=free_port(), controller_port=free_port(), heap=heap))
    try:
        started = time.monotonic()
        broker.start()
        say(f"broker on {broker.cfg.bootstrap} ready in {time.monotonic() - started:.1f} s ({home})")
        yield BenchBroker(broker.cfg.bootstrap, broker.status().pid)
    finally:
        broker.stop()
        shutil.rmtree(home, ignore_errors=True)


def unique_name(prefix: str) -> str:
    return f"bench.{prefix}.{uuid.uuid4().hex[:8]}"


async def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()
    return name


async def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        return int((await consumer.end_offsets([tp]))[tp])
    finally:
        await consumer.stop()


async def verify_end_offset(bootstrap: str, topic: str, expected: int, timeout_s: float = 15.0) -> None:
    """Fail unless the partition ends exactly at ``expected``: nothing lost, nothing doubled.

    Commit markers are written just after EndTxn answers, so the last one may lag a little.
    """
    deadline = time.monotonic() + timeout_s
    found = await end_offset(bootstrap, topic)
    for _ in range(int(timeout_s / 0.05)):
        if found >= expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
        found = await end_offset(bootstrap, topic)
    if found != expected:
        raise BenchError(f"{topic} ends at offset {found}, expected {expected}")


# -- workload and the aiokafka producer -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    records: int
    txn_size: int = TXN_SIZE
    record_size: int = RECORD_SIZE

    @property
    def transactions(self) -> int:
        return math.ceil(self.records / self.txn_size)

    def expected_end(self, *, transactional: bool) -> int:
        """End offset of a fresh one-partition topic after the run: each commit adds a marker."""
        return self.records + (self.transactions if transactional else 0)

    def keys(self) -> list[bytes]:
        return [b"job-%012d" % i for i in range(self.records)]

    def value(self) -> bytes:
        return os.urandom(self.record_size)  # incompressible, so no compression setting flatters it

    def chunks(self) -> Iterator[list[bytes]]:
        keys = self.keys()
        for start in range(0, len(keys), self.txn_size):
            yield keys[start : start + self.txn_size]


async def _send_each(producer: AIOKafkaProducer, topic: str, keys: list[bytes], value: bytes) -> None:
    for key in keys:
        await producer.send(topic, value, key=key, partition=0)


async def _send_batches(producer: AIOKafkaProducer, topic: str, keys: list[bytes], value: bytes) -> None:
    batch = producer.create_batch()
    for key in keys:
        if batch.append(key=key, value=value, timestamp=None) is None:  # full: ship it, start anew
            await producer.send_batch(batch, topic, partition=0)
            batch = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    await producer.send_batch(batch, topic, partition=0)


async def aiokafka_produce(
    bootstrap: str,
    topic: str,
    work: Workload,
    *,
    transactional: bool,
    api: Api = "send",
    max_batch_size: int = AIOKAFKA_DEFAULT_BATCH,
    broker_pid: int | None = None,
) -> dict[str, float]:
    """Write ``work`` to partition 0 of an empty ``topic`` with aiokafka; verify; metrics.

    Plain means acks=all and idempotent; transactional commits every ``txn_size`` records.
    Only the writing is timed: producer start-up (InitProducerId) and verification are not.
    """
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        transactional_id=f"bench.{uuid.uuid4().hex}" if transactional else None,
        max_batch_size=max_batch_size,
    )
    write = _send_batches if api == "batch" else _send_each
    value = work.value()
    chunks = list(work.chunks())
    await producer.start()
    try:
        start = Mark.now(broker_pid)
        for chunk in chunks:
            if transactional:
                async with producer.transaction():
                    await write(producer, topic, chunk, value)
            else:
                await write(producer, topic, chunk, value)
        await producer.flush()
        end = Mark.now(broker_pid)
    finally:
        await producer.stop()
    await verify_end_offset(bootstrap, topic, work.expected_end(transactional=transactional))
    return throughput(work.records, start, end)


async def raw_txn_produce(bootstrap: str, work: Workload, broker_pid: int | None = None) -> dict[str, float]:
    """One round of the raw transactional produce limit, on a fresh one-partition topic.

    The fastest aiokafka configuration measured by ``bench/clients.py``: the batch API
    (``create_batch``/``send_batch``) with batches large enough for a whole transaction.
    A benchmark's throughput divided by this, measured in the same run, is its efficiency.
    """
    topic = await create_topic(bootstrap, unique_name("raw"))
    return await aiokafka_produce(
        bootstrap, topic, work, transactional=True, api="batch", max_batch_size=LARGE_BATCH,
        broker_pid=broker_pid,
    )


# -- command line and output ----------------------------------------------------------


def bench_argparser(name: str, description: str) -> argparse.ArgumentParser:
    """The options every benchmark shares; a benchmark adds its own sizes."""
    parser = argparse.ArgumentParser(prog=f"tickwheel bench {name}", description=description)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (fewer, smaller rounds)")
    parser.add_argument("--rounds", type=int, help="rounds per case (default depends on --quick)")
    parser.add_argument(
        "--report",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="append the table to bench/README.md (default: yes, except with --quick)",
    )
    parser.add_argument("--bootstrap", help="reuse this running broker instead of starting a private one")
    return parser


def should_report(args: argparse.Namespace) -> bool:
    return bool(args.report) if args.report is not None else not args.quick


@dataclass(frozen=True, slots=True)
class BenchResult:
    name: str
    title: str
    params: Mapping[str, object]
    table: str
    notes: tuple[str, ...] = ()
    data: Mapping[str, object] = field(default_factory=dict)  # JSON-able detail for --json

    def markdown(self) -> str:
        params = ", ".join(f"{key}={value}" for key, value in self.params.items())
        notes = "".join(f"- {note}\n" for note in self.notes)
        return f"{self.title} ({params})\n\n{self.table}\n" + (f"\n{notes}" if notes else "")

    def as_json(self, machine: MachineInfo, when: datetime) -> str:
        return json.dumps(
            {
                "name": self.name,
                "title": self.title,
                "when": when.astimezone(UTC).isoformat(),
                "machine": asdict(machine),
                "params": dict(self.params),
                "notes": list(self.notes),
                "table": self.table,
                **self.data,
            },
            indent=2,
        )


def emit(result: BenchResult, args: argparse.Namespace) -> None:
    """Print the result (Markdown or JSON) and append it to the README when asked."""
    machine = machine_info()
    when = datetime.now(UTC)
    print(result.as_json(machine, when) if args.json else result.markdown(), flush=True)
    if should_report(args):
        path = append_report(result.name, result.markdown(), when=when, machine=machine)
        say(f"appended to {path}")
