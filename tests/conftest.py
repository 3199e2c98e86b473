"""Suite-wide fixtures: the real Kafka broker the integration tests run against.

The broker is started once per test session on free loopback ports under a temporary home
and stopped at the end. Set ``TICKWHEEL_TEST_BOOTSTRAP`` to reuse a broker that is already
running (faster while developing); CI never sets it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tickwheel.localbroker import BrokerConfig, LocalBroker, free_port


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker | None]:
    """A running single-node KRaft broker with transactions (None when reusing an external one)."""
    if os.environ.get("TICKWHEEL_TEST_BOOTSTRAP"):
        yield None
        return
    home = Path(tmp_path_factory.mktemp("broker-home"))
    local = LocalBroker(BrokerConfig(home=home, port=free_port(), controller_port=free_port()))
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def bootstrap(broker: LocalBroker | None) -> str:
    """The bootstrap address of the suite's broker."""
    if broker is None:
        return os.environ["TICKWHEEL_TEST_BOOTSTRAP"]
    return broker.cfg.bootstrap
