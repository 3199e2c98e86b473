"""The topic contract: names, partitioning and configuration of every Tickwheel topic.

All job-keyed topics share one partition count and the default murmur2 partitioner, so
partition p of each holds the same jobs (co-partitioning; see ARCHITECTURE.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from tickwheel.settings import Settings, load

DAY_MS = 86_400_000


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic of the contract: its logical name, whether job-keyed, and its configs."""

    name: str
    job_keyed: bool
    configs: dict[str, str]
    purpose: str


CONTRACT: tuple[TopicSpec, ...] = (
    TopicSpec(
        "commands",
        True,
        # Compacted by job id, but full history is kept for the forensics window first.
        {"cleanup.policy": "compact", "min.compaction.lag.ms": str(7 * DAY_MS)},
        "job commands (create, update, pause, resume, cancel, trigger, delete)",
    ),
    TopicSpec(
        "runs",
        True,
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
        "RunDue, RunCancelled, RunSkipped: written only by the processor",
    ),
    TopicSpec(
        "outcomes",
        True,
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
        "RunStarted, RunHeartbeat, RunSucceeded, RunFailed, RunTimedOut: written by workers",
    ),
    TopicSpec(
        "job-events",
        True,
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
        "JobAccepted, JobChanged, JobRejected, RunSettled: the processor's answers",
    ),
    TopicSpec(
        "sched-changelog",
        True,
        {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"},
        "JobState per job id: the scheduler's state, cached in RocksDB",
    ),
    TopicSpec(
        "logs",
        True,
        {"cleanup.policy": "delete", "retention.ms": str(3 * DAY_MS)},
        "LogChunk: bounded run output from workers",
    ),
    TopicSpec(
        "dlq",
        True,
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
        "DeadLetter: malformed inputs and runs that exhausted their attempts",
    ),
    TopicSpec(
        "audit",
        True,
        {"cleanup.policy": "delete", "retention.ms": "-1"},
        "AuditRecord: who asked for what, append-only, kept forever",
    ),
)


@dataclass(frozen=True, slots=True)
class Drift:
    topic: str
    what: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.what} expected {self.expected!r}, found {self.actual!r}"


def _admin(settings: Settings) -> Any:
    from aiokafka.admin import AIOKafkaAdminClient

    return AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=15_000)


async def create_topics(settings: Settings, replication_factor: int = 1) -> list[str]:
    """Create every missing topic of the contract; return the names created (idempotent)."""
    from aiokafka.admin import NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = _admin(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        missing = [
            NewTopic(
                settings.topic(spec.name), settings.partitions, replication_factor, topic_configs=spec.configs
            )
            for spec in CONTRACT
            if settings.topic(spec.name) not in existing
        ]
        if missing:
            # A concurrent creator may win the race; describe() reports any drift.
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(missing, timeout_ms=30_000)
        return [topic.name for topic in missing]
    finally:
        await admin.close()


async def describe_topics(settings: Settings) -> tuple[dict[str, dict[str, Any]], list[Drift]]:
    """What exists (partitions and configs per contract topic) and its drift from the contract."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    admin = _admin(settings)
    await admin.start()
    try:
        names = [settings.topic(spec.name) for spec in CONTRACT]
        existing = set(await admin.list_topics())
        present = [name for name in names if name in existing]
        meta = await admin.describe_topics(present) if present else []
        resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
        configs = await admin.describe_configs(resources) if resources else []
    finally:
        await admin.close()
    found: dict[str, dict[str, Any]] = {}
    for topic in meta:
        found[topic["topic"]] = {"partitions": len(topic["partitions"]), "configs": {}}
    for response in configs:
        for resource in response.resources:
            _code, _msg, _type, name, entries = resource[:5]
            if name in found:
                found[name]["configs"] = {entry[0]: entry[1] for entry in entries}
    return found, contract_drift(settings, found)


def contract_drift(settings: Settings, found: dict[str, dict[str, Any]]) -> list[Drift]:
    """Every way in which ``found`` (topic -> partitions, configs) departs from the contract."""
    drift: list[Drift] = []
    for spec in CONTRACT:
        name = settings.topic(spec.name)
        if name not in found:
            drift.append(Drift(name, "existence", "present", "missing"))
            continue
        partitions = found[name]["partitions"]
        if spec.job_keyed and partitions != settings.partitions:
            drift.append(Drift(name, "partitions", str(settings.partitions), str(partitions)))
        for key, expected in spec.configs.items():
            actual = found[name]["configs"].get(key)
            if actual != expected:
                drift.append(Drift(name, key, expected, str(actual)))
    return drift


# -- CLI ------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("topics", help="create or describe the Tickwheel topics")
    parser.add_argument("action", choices=("create", "describe"))
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument(
        "--check", action="store_true", help="describe: exit 1 if anything drifts from the contract"
    )
    parser.set_defaults(func=_cli)


def _cli(args: argparse.Namespace) -> int:
    from tickwheel.cli import CliError

    settings = load()
    try:
        if args.action == "create":
            created = asyncio.run(create_topics(settings, args.replication_factor))
            for name in created:
                print(f"created {name}")
            where = settings.bootstrap_servers
            print(f"{len(CONTRACT)} topics present ({len(created)} created) on {where}")
            return 0
        found, drift = asyncio.run(describe_topics(settings))
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise CliError(f"cannot reach Kafka at {settings.bootstrap_servers}: {reason}") from exc
    for spec in CONTRACT:
        name = settings.topic(spec.name)
        if name in found:
            shown = {key: found[name]["configs"].get(key) for key in spec.configs}
            print(f"{name:32} partitions={found[name]['partitions']:<4} {shown}")
    for item in drift:
        print(f"DRIFT {item}")
    return 1 if drift and args.check else 0
