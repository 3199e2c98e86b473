"""compose/docker-compose.yml stays consistent with the local launcher and the service set."""

from __future__ import annotations

from pathlib import Path

import yaml

from tickwheel.localbroker import BrokerConfig, server_properties

COMPOSE = Path(__file__).resolve().parents[2] / "compose" / "docker-compose.yml"


def _compose() -> dict[str, object]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def test_service_set() -> None:
    """The cluster file runs three brokers, every Tickwheel service, Prometheus and Grafana."""
    services = set(_compose()["services"])  # type: ignore[arg-type]
    assert services == {
        "kafka-1", "kafka-2", "kafka-3", "topics", "processor", "worker", "projections",
        "gateway", "prometheus", "grafana",
    }


def test_brokers_are_replicated_and_transactional() -> None:
    """Replication 3, min ISR 2, no unclean election, and the launcher's broker version."""
    services = _compose()["services"]
    pom = (COMPOSE.parent / "pom.xml").read_text()
    for name in ("kafka-1", "kafka-2", "kafka-3"):
        broker = services[name]  # type: ignore[index]
        env = broker["environment"]
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == "2"
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "3"
        assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "2"
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
        version = broker["image"].split(":")[1]
        assert f"<kafka.version>{version}</kafka.version>" in pom


def test_local_launcher_shares_the_transaction_settings() -> None:
    """The single-node launcher differs only where one node must (replication 1)."""
    props = server_properties(BrokerConfig(home=Path("/tmp/x")))
    env = _compose()["services"]["kafka-1"]["environment"]  # type: ignore[index]
    assert "auto.create.topics.enable=false" in props
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000" in props
    assert env["KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS"] == "1000"
    assert "transaction.state.log.replication.factor=1" in props
