"""A network partition between one processor and the broker (Linux network namespace).

The partitioned processor runs in a namespace of its own (``netns.namespace``) and reaches
the test's own broker through a veth pair; a second processor and the workers use loopback.
:class:`Partition` drops every packet on the veth (nft, iptables, or neighbour entries when
neither tool is installed) for some seconds, then heals the link.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos import netns
from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet, own_broker
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    cancel_commands,
    deploy,
    every_second_jobs,
    now_ms,
    one_time_jobs,
    recover_and_read_stores,
    run_ids,
    wait_dispatched,
    wait_settled,
)

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


@pytest.fixture
def namespace() -> object:
    """A namespace + veth pair, or a skip naming what this machine lacks."""
    reason = netns.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with netns.namespace() as ns:
        yield ns


async def test_partitioned_processor_commits_nothing_and_loses_nothing(
    tmp_path: Path, scale: Scale, chaos_report: Callable[..., None], namespace: netns.Namespace
) -> None:
    """Fault: drop all traffic between the namespaced processor and the broker for longer than
    its session timeout while every-second jobs and a hot instant fire; the processor on
    loopback takes its partitions; heal; repeat. Checker: nothing lost or duplicated (the cut
    processor committed nothing), no aborted read, every run settled, recovered state of the
    partitioned member = changelog = fold(log)."""
    rng = random.Random(scale.seed + 4)
    with own_broker(tmp_path / "broker", extra_host=namespace.host_ip) as broker:
        deployment = await deploy(broker.bootstrap, tmp_path, 4, start_timeout_ms=30_000,
                                  transaction_timeout_ms=8_000)
        outside = Fleet(deployment)
        inside = Fleet(deployment, prefix=namespace.exec_prefix())
        recorder = Recorder(deployment.settings)
        cron = every_second_jobs("cron", 10)
        hot = one_time_jobs("hot", 1_000, now_ms() + 15_000)
        partition = netns.Partition(namespace)
        try:
            async with recorder.tailing():
                await recorder.submit([*cron, *hot])
                inside.processor("inside", TICKWHEEL_BOOTSTRAP_SERVERS=broker.external_bootstrap)
                await asyncio.sleep(4)  # the namespaced member owns partitions before the second joins
                outside.processor("outside")
                outside.worker("w0")
                await asyncio.sleep(6)
                for _ in range(scale.partitions):
                    with partition.cutting():
                        await asyncio.sleep(rng.uniform(*scale.partition_seconds))
                    await asyncio.sleep(8)  # heal: the cut member learns it was fenced and rejoins
                await recorder.submit(cancel_commands(cron))
                missing = await wait_dispatched(deployment.settings, run_ids(hot), 60)
                unsettled = await wait_settled(deployment.settings, 90)
                inside.stop_all()
                outside.stop_all()
            assert not missing, inside.logs() + outside.logs()
            assert not unsettled, inside.logs() + outside.logs()
            stores = await recover_and_read_stores(outside, outside.home / "inside", partitions=4)
            history = await recorder.finish()
        finally:
            partition.heal()
            inside.stop_all()
            outside.stop_all()
    result = check(history, settle=True, stores=stores)
    chaos_report(f"network partition ({partition.backend})", partition.cuts, result)
    assert result.problems() == {}, result.explain() + "\n" + inside.logs() + outside.logs()
    inside_log = inside.members[0].log_path.read_text(errors="replace")
    assert "fenced" in inside_log or "transaction failed" in inside_log or "-> closed" in inside_log
