"""The local broker launcher: idempotent start/stop and clear failure messages."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tickwheel.localbroker import BrokerConfig, BrokerError, LocalBroker, free_port

pytestmark = pytest.mark.broker


def _config(home: Path, **overrides: object) -> BrokerConfig:
    values: dict[str, object] = {"home": home, "port": free_port(), "controller_port": free_port()}
    values.update(overrides)
    return BrokerConfig(**values)  # type: ignore[arg-type]


def test_start_when_running_is_a_noop(broker: LocalBroker | None) -> None:
    """A second start of a running broker returns False and leaves it running."""
    if broker is None:
        pytest.skip("external broker in use")
    pid = broker.status().pid
    assert broker.start() is False
    assert broker.status().pid == pid


def test_stop_when_stopped_is_a_noop(tmp_path: Path) -> None:
    """Stopping a broker that never started says so and succeeds."""
    assert LocalBroker(_config(tmp_path)).stop() is False
    assert LocalBroker(_config(tmp_path)).status().running is False


def test_port_taken_is_reported(tmp_path: Path) -> None:
    """A start on a port another process holds fails with the port in the message."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(BrokerError, match=f"port {port} .* in use"):
            LocalBroker(_config(tmp_path, port=port)).start()


def test_missing_java_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without java on PATH the start fails naming Java."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrokerError, match="Java is not on PATH"):
        LocalBroker(_config(tmp_path)).start()


def test_missing_jars_without_maven_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Missing jars and no Maven to resolve them: the message names both."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    java = shutil.which("java")
    assert java is not None
    (bin_dir / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(BrokerError, match=r"jars are missing .* Maven"):
        LocalBroker(_config(tmp_path, libs_dir=tmp_path / "no-libs")).start()


def test_jvm_that_dies_at_start_shows_the_log_tail(tmp_path: Path) -> None:
    """A broker process that exits during start-up is reported with its output."""
    with pytest.raises(BrokerError, match=r"exited during start-up(.|\n)*Invalid maximum heap size"):
        LocalBroker(_config(tmp_path, heap="bogus")).start(timeout_s=60)


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def test_cli_status_and_failed_start_exit_codes(tmp_path: Path) -> None:
    """`tickwheel broker status` exits 3 when stopped; a failed start exits 1 with one reason."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        env = {
            **os.environ, "TICKWHEEL_HOME": str(tmp_path),
            "TICKWHEEL_BROKER_PORT": str(holder.getsockname()[1]),
            "TICKWHEEL_CONTROLLER_PORT": str(free_port()),
        }
        cli = [sys.executable, "-m", "tickwheel.cli", "broker"]
        status = _run([*cli, "status"], env)
        start = _run([*cli, "start"], env)
    assert status.returncode == 3
    assert "not running" in status.stdout
    assert start.returncode == 1
    assert "already in use" in start.stderr
    assert "Traceback" not in start.stderr
