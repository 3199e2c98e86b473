"""Synthetic scheduler state, written straight to ``sched-changelog``, and processor helpers.

Registering a million jobs through ``commands`` takes the processor minutes of absorbing;
a benchmark about recovery, memory or steady dispatch only needs the *result* of that: one
``JobState`` per job in the compacted changelog. :func:`write_changelog` builds those states
with the real model (``core.step(None, CreateJob(...))`` once per distinct spec, then
``dataclasses.replace`` for the job id), encodes them with ``mappers.state_to_bytes`` and
produces them with aiokafka's batch API to ``murmur2(job id) % partitions``, the partition
the processor owning that job reads. A processor started on an empty disk restores them as
if it had absorbed the registrations itself.

Also here, because every benchmark of this family needs them: the environment and launch of
a processor subprocess (:func:`start_processor`) and a reader of committed ``RunDue``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import murmur2

from tickwheel.schemas import mappers
from tickwheel.schemas.model import CommandMeta, CreateJob, ExecutorSpec, JobSpec, JobState, OneTime, RunDue
from tickwheel.settings import Settings
from tickwheel.streams import core
from tickwheel.streams.timers import TIMERS_HEADER, pack_timers

BATCH_BYTES = 512 * 1024  # below the broker's 1 MiB message.max.bytes, as the processor uses
TEAM = "bench"


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default (murmur2) partitioner gives ``key``, as the processor's inputs."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def synth_job_id(i: int) -> str:
    return f"synth-{i:09d}"


def template_state(at_ms: int, now_ms: int, cfg: core.CoreConfig) -> JobState:
    """The state the real core gives a one-time job due at ``at_ms`` created at ``now_ms``."""
    spec = JobSpec(team=TEAM, name="synth", schedule=OneTime(at_ms), executor=ExecutorSpec("noop"))
    meta = CommandMeta("c-synth", "synth-template", now_ms, "bench")
    state, _ = core.step(None, CreateJob(meta, spec), now_ms, cfg)
    if state is None:
        raise ValueError(f"core rejected the synthetic job due at {at_ms}")
    return state


def synth_states(
    n: int, due_of: Callable[[int], int], now_ms: int, cfg: core.CoreConfig | None = None
) -> Iterator[JobState]:
    """``n`` job states, job ``i`` due at ``due_of(i)``; one core step per distinct instant."""
    cfg = cfg or core.CoreConfig()
    templates: dict[int, JobState] = {}
    for i in range(n):
        at = due_of(i)
        template = templates.get(at)
        if template is None:
            template = templates[at] = template_state(at, now_ms, cfg)
        yield dataclasses.replace(template, job_id=synth_job_id(i))


@dataclass(frozen=True, slots=True)
class SynthReport:
    records: int
    value_bytes: int  # sum of key + value sizes, what the changelog holds before overhead
    seconds: float
    per_partition: tuple[int, ...]

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


async def write_changelog(
    settings: Settings, states: Iterator[JobState], *, flush_every: int = 50_000
) -> SynthReport:
    """Produce each state to ``sched-changelog[murmur2(job id) % partitions]`` with the batch API."""
    topic = settings.topic("sched-changelog")
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, acks="all", max_batch_size=BATCH_BYTES, linger_ms=0
    )
    await producer.start()
    started = time.perf_counter()
    batches = {p: producer.create_batch() for p in range(settings.partitions)}
    counts = [0] * settings.partitions
    pending: list[asyncio.Future[object]] = []
    size = 0
    try:
        for n, state in enumerate(states, 1):
            key = state.job_id.encode()
            value = mappers.state_to_bytes(state)
            # the header the processor writes: restore reads timers from it, not the state
            headers = [(TIMERS_HEADER, pack_timers(core.timers_of(state)))]
            p = partition_of(key, settings.partitions)
            size += len(key) + len(value)
            counts[p] += 1
            if batches[p].append(key=key, value=value, timestamp=None, headers=headers) is None:
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=None, headers=headers)
            if n % flush_every == 0:  # bound the futures held and let the sender drain
                await asyncio.gather(*pending)
                pending.clear()
        for p, batch in batches.items():
            if batch.record_count():
                pending.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return SynthReport(sum(counts), size, time.perf_counter() - started, tuple(counts))


# -- a processor subprocess -----------------------------------------------------------


def bench_settings(bootstrap: str, name: str, home: Path, partitions: int, **extra: object) -> Settings:
    return Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=f"{name}.",
        partitions=partitions,
        app_id=name,
        home=home,
        **extra,  # type: ignore[arg-type]
    )


def processor_env(settings: Settings, log_level: str = "INFO") -> dict[str, str]:
    """``TICKWHEEL_*`` variables that make ``tickwheel processor`` run with ``settings``."""
    return {
        **os.environ,
        "TICKWHEEL_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TICKWHEEL_TOPIC_PREFIX": settings.topic_prefix,
        "TICKWHEEL_PARTITIONS": str(settings.partitions),
        "TICKWHEEL_APP_ID": settings.app_id,
        "TICKWHEEL_HOME": str(settings.home),
        "TICKWHEEL_LOOKAHEAD_MS": str(settings.lookahead_ms),
        "TICKWHEEL_MISFIRE_TOLERANCE_MS": str(settings.misfire_tolerance_ms),
        "TICKWHEEL_LOG_LEVEL": log_level,
        "TICKWHEEL_PROCESSOR_INSTANCE_ID": settings.processor_instance_id,
    }


def start_processor(settings: Settings, log: IO[bytes] | None = None) -> subprocess.Popen[bytes]:
    """``python -m tickwheel processor`` as its own process (its own core, as in production)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tickwheel", "processor"],
        env=processor_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=log if log is not None else subprocess.DEVNULL,
    )


def rss_kib(pid: int) -> int:
    """VmRSS of a live process in KiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def du_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (what ``du --apparent-size`` counts)."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def collect_run_dues(
    settings: Settings, until: Callable[[list[tuple[int, RunDue]]], bool], timeout_s: float
) -> list[tuple[int, RunDue]]:
    """(commit timestamp, RunDue) of committed ``runs`` records, read until ``until(seen)``."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    await consumer.start()
    seen: list[tuple[int, RunDue]] = []
    deadline = time.monotonic() + timeout_s
    try:
        tps = [TopicPartition(settings.topic("runs"), p) for p in range(settings.partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while not until(seen) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for records in batch.values():
                for record in records:
                    event = mappers.run_event_from_bytes(record.value)
                    if isinstance(event, RunDue):
                        seen.append((record.timestamp, event))
    finally:
        await consumer.stop()
    return seen


async def committed_count(settings: Settings, topic: str) -> int:
    """Records committed to ``topic`` so far (read_committed end offsets, summed)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        tps = [TopicPartition(settings.topic(topic), p) for p in range(settings.partitions)]
        return int(sum((await consumer.end_offsets(tps)).values()))
    finally:
        await consumer.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def main(argv: list[str] | None = None) -> int:
    """``tickwheel bench synth --jobs N``: fill the configured app's changelog (TICKWHEEL_* env)."""
    import argparse
    import random

    from tickwheel.settings import load
    from tickwheel.topics import create_topics

    parser = argparse.ArgumentParser(prog="tickwheel bench synth", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="one-time jobs due 1-30 days out")
    args = parser.parse_args(argv)
    settings = load()
    start = now_ms()
    rng = random.Random(7)

    async def run() -> SynthReport:
        await create_topics(settings)
        return await write_changelog(settings, synth_states(args.jobs, due, start))

    def due(_i: int) -> int:  # on the hour, 1-30 days out: few distinct specs, none fires soon
        return start + 86_400_000 + rng.randrange(30 * 24) * 3_600_000

    report = asyncio.run(run())
    print(f"{report.records:,} states to {settings.topic('sched-changelog')} in {report.seconds:.1f} s")
    print("start the processor on an empty state directory to restore them")
    return 0
