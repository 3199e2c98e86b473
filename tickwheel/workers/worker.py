"""The worker process: one producer for outcomes and logs, one consumer per pool served.

``Worker(settings, config).run(stop)`` runs until ``stop`` is set, then drains (see
``PoolRunner._shutdown``). Everything time-dependent reads the injected ``clock`` (epoch
milliseconds), so tests can freeze or jump time; the event loop's own sleeps stay real.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaProducer

from tickwheel.settings import Settings
from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import ExecutorEnv, ExecutorRegistry, default_registry
from tickwheel.workers.metrics import WorkerMetrics
from tickwheel.workers.pool import PoolRunner
from tickwheel.workers.run import Services
from tickwheel.workers.secrets import SecretStore
from tickwheel.workers.sink import KafkaSink
from tickwheel.workers.ssrf import Resolve, SsrfGuard, system_resolve
from tickwheel.workers.tenancy import Slots


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Worker:
    """Executes the RunDue of its pools and reports their outcomes."""

    def __init__(
        self,
        settings: Settings,
        config: WorkerConfig,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        metrics: WorkerMetrics | None = None,
        secrets: SecretStore | None = None,
        registry: ExecutorRegistry | None = None,
        resolve: Resolve = system_resolve,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.config = config
        self.clock = clock
        self.metrics = metrics or WorkerMetrics.create()
        self.secrets = secrets if secrets is not None else SecretStore.load(config.secrets_file)
        self.registry = registry or default_registry()
        self.guard = SsrfGuard(config.ssrf_allow, resolve)
        self.sleep = sleep
        self.pools: dict[str, PoolRunner] = {}
        self.started = asyncio.Event()  # the pools exist (their consumers may still be joining)

    async def run(self, stop: asyncio.Event) -> None:
        # Leases get a producer (a connection) of their own: see KafkaSink.
        reports, starts = self._producer("reports"), self._producer("starts")
        async with contextlib.AsyncExitStack() as producers:
            for producer in (reports, starts):
                producers.push_async_callback(producer.stop)  # also after a failed start
                await producer.start()
            topic = self.settings.topic
            sink = KafkaSink(reports, topic("outcomes"), topic("logs"), start_producer=starts)
            services = self._services(sink)
            self.pools = {pool: PoolRunner(pool, self.settings, services) for pool in self.config.pools}
            self.started.set()
            await asyncio.gather(*(runner.run(stop) for runner in self.pools.values()))

    def _producer(self, role: str) -> AIOKafkaProducer:
        return AIOKafkaProducer(
            bootstrap_servers=self.settings.bootstrap_servers,
            client_id=f"{self.config.worker_id}.{role}",
            enable_idempotence=True,  # retries cannot reorder or duplicate a lease's heartbeats
            acks="all",  # a lease is granted only once it cannot be lost with the leader
            linger_ms=5,
            request_timeout_ms=10_000,
        )

    def _services(self, sink: KafkaSink) -> Services:
        env = ExecutorEnv(config=self.config, guard=self.guard, registry=self.registry, sleep=self.sleep)
        return Services(
            config=self.config,
            sink=sink,
            clock=self.clock,
            metrics=self.metrics,
            secrets=self.secrets,
            registry=self.registry,
            executor_env=env,
            slots=Slots(self.config.concurrency),
            sleep=self.sleep,
        )

    async def wait_assigned(self) -> None:
        """Until every pool's consumer has been given its partitions (for tests and readiness)."""
        await self.started.wait()
        await asyncio.gather(*(runner.assigned.wait() for runner in self.pools.values()))
