"""What the gateway needs from the outside world, as small protocols with Kafka implementations.

Handlers see only these: a :class:`CommandSink` to append commands and audit records, a
:class:`LagSource` for the projection's lag, and a :class:`Clock`. Unit tests pass fakes
(a list-backed sink, a settable clock); the app's ``cleanup_ctx`` builds the Kafka ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tickwheel.client import CommandClient
from tickwheel.projections.runtime import end_offsets, lag
from tickwheel.schemas import mappers
from tickwheel.schemas.model import AuditRecord, Command
from tickwheel.settings import Settings

PING_TIMEOUT_S = 3.0


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Epoch milliseconds (command and audit timestamps, preview anchors)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (rate limiting)."""
        ...


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class CommandSink(Protocol):
    async def submit(self, command: Command, audit: AuditRecord) -> None:
        """Append the command and its audit record; raises if either was not acknowledged."""
        ...

    async def ping(self) -> None:
        """Raise unless the log is reachable."""
        ...


class LagSource(Protocol):
    async def lag(self, positions: Mapping[tuple[str, int], int]) -> dict[str, int] | None:
        """Records not yet folded per topic given the read model's positions, or None when the
        log cannot be asked."""
        ...

    async def ends(self) -> dict[tuple[str, int], int] | None:
        """The end offset of every projected (logical topic, partition) now, or None when the
        log cannot be asked (empty while the topics do not exist)."""
        ...


class KafkaSink:
    """Commands through :class:`CommandClient` (idempotent producer), audit records beside them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.client = CommandClient(settings, principal="gateway")
        self._audit = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=5
        )

    async def start(self) -> None:
        await self.client.__aenter__()
        await self._audit.start()

    async def stop(self) -> None:
        await self._audit.stop()
        await self.client.__aexit__()

    async def submit(self, command: Command, audit: AuditRecord) -> None:
        # Audit first, so no command is on the log without its "who asked": a failed command
        # append leaves an audit record of an attempt, which is still true.
        await self._audit.send_and_wait(
            self.settings.topic("audit"), mappers.to_bytes(audit), key=command.meta.job_id.encode()
        )
        await self.client.submit(command)

    async def ping(self) -> None:
        partitions = await asyncio.wait_for(
            self._audit.partitions_for(self.settings.topic("commands")), PING_TIMEOUT_S
        )
        if not partitions:
            raise ConnectionError("commands topic has no partitions")


class KafkaLag:
    """End offsets from a read_committed consumer, positions from the read model."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            isolation_level="read_committed",
            enable_auto_commit=False,
        )

    async def start(self) -> None:
        await self._consumer.start()

    async def stop(self) -> None:
        await self._consumer.stop()

    async def lag(self, positions: Mapping[tuple[str, int], int]) -> dict[str, int] | None:
        ends = await self.ends()
        if not ends:
            return None
        return lag(ends, positions)

    async def ends(self) -> dict[tuple[str, int], int] | None:
        try:
            return await asyncio.wait_for(end_offsets(self._consumer, self.settings), PING_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - an unreachable broker means "ends unknown", not an error
            return None
