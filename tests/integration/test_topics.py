"""Topic creation and the contract: partitions, compaction, forensics window, drift."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.kafka_util import create_topic, unique
from tickwheel.settings import Settings
from tickwheel.topics import CONTRACT, create_topics, describe_topics

pytestmark = pytest.mark.broker


def _settings(bootstrap: str, prefix: str, partitions: int = 3) -> Settings:
    return Settings(bootstrap_servers=bootstrap, topic_prefix=prefix, partitions=partitions)


async def test_create_is_idempotent_and_matches_the_contract(bootstrap: str) -> None:
    """Creating twice creates once; every topic then has the contract's configuration."""
    settings = _settings(bootstrap, unique("tw") + ".")
    created = await create_topics(settings)
    assert sorted(created) == sorted(settings.topic(spec.name) for spec in CONTRACT)
    assert await create_topics(settings) == []
    found, drift = await describe_topics(settings)
    assert drift == []
    commands = found[settings.topic("commands")]
    assert commands["partitions"] == 3
    assert commands["configs"]["cleanup.policy"] == "compact"
    assert commands["configs"]["min.compaction.lag.ms"] == str(7 * 86_400_000)
    assert found[settings.topic("sched-changelog")]["configs"]["cleanup.policy"] == "compact"
    assert found[settings.topic("runs")]["configs"]["cleanup.policy"] == "delete"
    assert {found[settings.topic(s.name)]["partitions"] for s in CONTRACT if s.job_keyed} == {3}


async def test_describe_reports_drift(bootstrap: str) -> None:
    """A job-keyed topic with the wrong partition count or policy, or a missing one, is drift."""
    settings = _settings(bootstrap, unique("tw") + ".")
    await create_topic(bootstrap, settings.topic("runs"), partitions=2, **{"cleanup.policy": "compact"})
    for _ in range(50):  # topic metadata reaches the broker's cache asynchronously
        found, drift = await describe_topics(settings)
        if settings.topic("runs") in found:
            break
        await asyncio.sleep(0.1)
    kinds = {(item.topic, item.what) for item in drift}
    assert (settings.topic("runs"), "partitions") in kinds
    assert (settings.topic("runs"), "cleanup.policy") in kinds
    assert (settings.topic("commands"), "existence") in kinds
