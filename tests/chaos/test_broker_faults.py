"""Broker faults: SIGKILL of the (test's own) broker and restart on the same data, repeatedly.

The scenario uses a broker of its own (``faults.OwnBroker``) on free loopback ports under
``tmp_path``: the suite's shared broker is never killed.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.checker import check
from tests.chaos.conftest import Scale
from tests.chaos.faults import Fleet, own_broker
from tests.chaos.recorder import Recorder
from tests.chaos.scenario import (
    cancel_commands,
    deploy,
    every_second_jobs,
    http_executor,
    now_ms,
    one_time_jobs,
    recover_and_read_stores,
    run_ids,
    wait_dispatched,
    wait_settled,
)
from tests.integration.http_target import HttpTarget

pytestmark = [pytest.mark.broker, pytest.mark.timeout(900)]


async def test_broker_sigkill_and_restart_loses_and_duplicates_nothing(
    tmp_path: Path, scale: Scale, chaos_report: Callable[..., None]
) -> None:
    """Fault: SIGKILL the broker (no flush, no controlled shutdown) while a processor and two
    workers run every-second http jobs and a hot instant, restart it on the same data, repeat.
    Checker: nothing lost or duplicated, no aborted read, each effect once at the target, every
    run settled after the cron jobs are cancelled, recovered state = changelog = fold(log)."""
    rng = random.Random(scale.seed + 3)
    with own_broker(tmp_path / "broker") as broker:
        deployment = await deploy(broker.bootstrap, tmp_path, 3, start_timeout_ms=30_000)
        fleet = Fleet(deployment)
        recorder = Recorder(deployment.settings)
        async with HttpTarget() as target:
            recorder.target = target
            cron = every_second_jobs("cron", 5, http_executor(target.url("/effect")))
            hot = one_time_jobs("hot", 500, now_ms() + 12_000)
            try:
                async with recorder.tailing():
                    await recorder.submit([*cron, *hot])
                    fleet.processor("p")
                    fleet.worker("w0")
                    fleet.worker("w1")
                    restarts = []
                    for _ in range(scale.broker_restarts):
                        await asyncio.sleep(rng.uniform(5, 9))
                        restarts.append(await asyncio.to_thread(broker.restart))
                    await asyncio.sleep(15)  # clients reconnect and catch up
                    await recorder.submit(cancel_commands(cron))
                    missing = await wait_dispatched(deployment.settings, run_ids(hot), 60)
                    unsettled = await wait_settled(deployment.settings, 90)
                    fleet.stop_all()
                assert not missing, fleet.logs()
                assert not unsettled, fleet.logs()
                stores = await recover_and_read_stores(fleet, fleet.home / "p", partitions=3)
                history = await recorder.finish()
            finally:
                fleet.stop_all()
    result = check(history, settle=True, stores=stores)
    chaos_report("broker SIGKILL + restart", scale.broker_restarts, result,
                 restart_s=[round(s, 1) for s in restarts])
    assert result.problems() == {}, result.explain() + "\n" + fleet.logs()
