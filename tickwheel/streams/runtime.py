"""The scheduler processor process: group membership, partition tasks, the tick loop.

One consumer subscribes to ``commands`` and ``outcomes`` with the range assignor, which
gives one member partition p of *both* topics (equal partition counts), so a task sees every
input of its jobs. On assignment a :class:`PartitionTask` fences the previous owner, restores
its store and only then consumes; on revocation it is closed between steps. The loop steps
every running task on each batch of input and at least every ``tick_ms`` so timers fire
without input.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from tickwheel.gctune import tune_gc
from tickwheel.settings import Settings, load
from tickwheel.streams.metrics import ProcessorMetrics
from tickwheel.streams.processor import PartitionTask, TaskFencedError, TaskState, Topics
from tickwheel.streams.store import RocksDBStore

log = logging.getLogger("tickwheel.processor")


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Processor:
    """Runs the partition tasks this process owns until ``stop`` is set."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        metrics: ProcessorMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.topics = Topics.from_settings(settings)
        self.clock = clock
        self.metrics = metrics or ProcessorMetrics.create()
        self.tasks: dict[int, PartitionTask] = {}
        self._starting: dict[int, asyncio.Task[None]] = {}
        self._lock = asyncio.Lock()
        self.consumer: AIOKafkaConsumer | None = None

    async def run(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            group_id=f"{self.settings.app_id}.sched",
            group_instance_id=self.settings.processor_instance_id or None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
            max_poll_interval_ms=300_000,
            max_partition_fetch_bytes=4 * 1024 * 1024,
        )
        self.consumer = consumer
        consumer.subscribe([self.topics.commands, self.topics.outcomes], listener=_Listener(self))
        await consumer.start()
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=self.settings.tick_ms, max_records=5_000)
                async with self._lock:
                    await self._step_all(batch)
        finally:
            async with self._lock:
                for partition in list(self.tasks):
                    await self._close_task(partition)
            await consumer.stop()

    async def _step_all(self, batch: dict[TopicPartition, list[Any]]) -> None:
        by_partition: dict[int, list[list[Any]]] = {}
        for tp, records in batch.items():
            by_partition.setdefault(tp.partition, []).append(records)
        for partition, task in list(self.tasks.items()):
            if task.state is not TaskState.RUNNING:
                continue
            records = merge_inputs(by_partition.get(partition, []))
            try:
                await task.step(records)
            except TaskFencedError:
                await self._close_task(partition)
            except Exception:
                log.exception("task %d: step failed; restarting the task", partition)
                await self._restart_task(partition)

    # -- task lifecycle -----------------------------------------------------------------

    def _new_task(self, partition: int) -> PartitionTask:
        path = Path(self.settings.state_dir) / self.settings.app_id / str(partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        return PartitionTask(
            partition,
            settings=self.settings,
            store=RocksDBStore(path),
            clock=self.clock,
            metrics=self.metrics,
        )

    def _assign(self, partition: int) -> None:
        if self.consumer is not None:
            self.consumer.pause(*self._input_tps(partition))
        self._starting[partition] = asyncio.create_task(self._start_task(partition))

    async def _start_task(self, partition: int) -> None:
        """Open the store, fence, restore, then consume from the committed offsets (read fresh).

        A start that fails (broker unreachable, RocksDB unable to open or write on a full
        disk) is retried with backoff for as long as this process owns the partition; the
        partition's inputs stay paused meanwhile, so nothing is decided without its state.
        """
        delay = 1.0
        while True:
            task: PartitionTask | None = None
            try:
                task = self._new_task(partition)
                self.tasks[partition] = task
                self.metrics.assigned_partitions.set(len(self.tasks))
                await task.start()
                await self._seek_to_committed(task)
                break
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("task %d: start failed; retrying in %.0f s", partition, delay)
                if task is not None:
                    self.tasks.pop(partition, None)
                    await task.close()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
        self._starting.pop(partition, None)
        if self.consumer is not None:
            self.consumer.resume(*task.input_tps)

    async def _seek_to_committed(self, task: PartitionTask) -> None:
        assert self.consumer is not None
        committed = await self.consumer.seek_to_committed(*task.input_tps)
        for tp, offset in committed.items():
            if not offset:
                await self.consumer.seek_to_beginning(tp)

    async def _restart_task(self, partition: int) -> None:
        await self._close_task(partition)
        if self.consumer is not None and set(self._input_tps(partition)) <= self.consumer.assignment():
            self._assign(partition)

    async def _close_task(self, partition: int) -> None:
        starting = self._starting.pop(partition, None)
        if starting is not None:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
        task = self.tasks.pop(partition, None)
        if task is not None:
            await task.close()
        self.metrics.assigned_partitions.set(len(self.tasks))

    def _input_tps(self, partition: int) -> tuple[TopicPartition, TopicPartition]:
        return (
            TopicPartition(self.topics.commands, partition),
            TopicPartition(self.topics.outcomes, partition),
        )

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:
            for partition in sorted({tp.partition for tp in revoked}):
                await self._close_task(partition)

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self._lock:
            partitions = {tp.partition for tp in assigned}
            for partition in sorted(partitions):
                both = set(self._input_tps(partition)) <= assigned
                if both and partition not in self.tasks and partition not in self._starting:
                    self._assign(partition)
                elif not both:
                    log.error("partition %d assigned without its co-partition: not served", partition)


def merge_inputs(streams: list[list[Any]]) -> list[Any]:
    """Interleave partition p of the input topics by timestamp, never reordering one topic.

    Each list is one topic-partition in offset order, which is the order its records must be
    decided in (a cancel after a create, a heartbeat after a start) whatever their
    producer-set timestamps say; a merge only chooses which topic's head goes next.
    """
    return list(heapq.merge(*streams, key=lambda record: record.timestamp))


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, processor: Processor) -> None:
        self.processor = processor

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.processor.on_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.processor.on_assigned(assigned)


# -- CLI ------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("processor", help="run the scheduler processor")
    parser.add_argument("--metrics-port", type=int, default=0, help="serve /metrics here (0: off)")
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.logs import configure_logging

    configure_logging()
    settings = load()
    tune_gc()
    processor = Processor(settings)
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=settings.metrics_host, registry=processor.metrics.registry)
    asyncio.run(_serve(processor))
    return 0


async def _serve(processor: Processor) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await processor.run(stop)
