"""The process and container executors: argv only, environment, exit codes, timeout, kill, cancel."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import ExecutorConfigError, ExecutorEnv, RunContext, builtin_registry
from tickwheel.workers.executors.container import container_argv
from tickwheel.workers.executors.process import ProcessExecutor
from tickwheel.workers.ssrf import SsrfGuard, system_resolve

PY = sys.executable


class Sink:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.written = asyncio.Event()

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.written.set()

    @property
    def text(self) -> str:
        return "".join(self.parts)


def _env(**config: Any) -> ExecutorEnv:
    worker = WorkerConfig(worker_id="w-test", kill_grace_ms=300, **config)
    return ExecutorEnv(worker, SsrfGuard((), system_resolve), builtin_registry())


def _ctx(sink: Sink, previous: str | None = None) -> RunContext:
    return RunContext("r-1", "job-1", 3, "team-a", sink, "r-1", previous)


def _process(config: dict[str, Any]) -> ProcessExecutor:
    executor = _env().registry.build("process", config, _env())
    assert isinstance(executor, ProcessExecutor)
    return executor


def test_a_shell_string_is_rejected() -> None:
    """argv must be a list: a string (a shell command line) is a config error."""
    with pytest.raises(ExecutorConfigError, match="never a shell string"):
        _process({"argv": "echo hi; rm -rf /"})
    with pytest.raises(ExecutorConfigError, match="must not be empty"):
        _process({"argv": []})


async def test_exit_zero_succeeds_with_output_and_run_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child gets the run variables and config env but not the worker's env; output is captured."""
    monkeypatch.setenv("TICKWHEEL_SECRET_DB", "s3cret")
    script = (
        "import os\n"
        "e = os.environ\n"
        "print('run', e['TICKWHEEL_RUN_ID'], e['TICKWHEEL_ATTEMPT'], e['TICKWHEEL_JOB_ID'])\n"
        "print('mode', os.environ['MODE'], 'secret' in str(os.environ))\n"
        "import sys; print('to stderr', file=sys.stderr)\n"
        "print('last line')\n"
    )
    sink = Sink()
    result = await _process({"argv": [PY, "-c", script], "env": {"MODE": "x"}}).run(_ctx(sink))
    assert result.ok
    assert result.result.endswith("last line")
    assert "run r-1 3 job-1" in sink.text
    assert "mode x False" in sink.text
    assert "to stderr" in sink.text


async def test_nonzero_exit_fails_retryably_unless_configured() -> None:
    """Non-zero exit is RunFailed, retryable by default; listed codes or retryable=false are final."""
    argv = [PY, "-c", "raise SystemExit(3)"]
    assert (await _process({"argv": argv}).run(_ctx(Sink()))).retryable
    final = await _process({"argv": argv, "non_retryable_exit_codes": [3]}).run(_ctx(Sink()))
    assert not final.ok
    assert not final.retryable
    assert final.error_message == "process exited with status 3"
    assert not (await _process({"argv": argv, "retryable": False}).run(_ctx(Sink()))).retryable


async def test_missing_binary_is_a_final_failure() -> None:
    """A program that cannot be started fails without retry."""
    result = await _process({"argv": ["/nonexistent/tool"]}).run(_ctx(Sink()))
    assert not result.ok
    assert result.error_class == "SpawnFailed"
    assert not result.retryable


async def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    """On timeout the group gets SIGTERM; a grandchild dies with it."""
    pidfile = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    result = await _process({"argv": [PY, "-c", script], "timeout_ms": 1_500}).run(_ctx(Sink()))
    assert not result.ok
    assert result.error_class == "Timeout"
    assert result.retryable
    grandchild = int(pidfile.read_text())
    await _until_gone(grandchild)


async def test_sigterm_ignored_means_sigkill_after_the_grace_period() -> None:
    """A child that ignores SIGTERM is SIGKILLed once kill_grace_ms has passed."""
    script = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(60)\n"
    executor = _process({"argv": [PY, "-c", script], "timeout_ms": 1_500, "kill_grace_ms": 200})
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await executor.run(_ctx(Sink()))
    assert result.error_class == "Timeout"
    assert loop.time() - started < 10


async def test_cancel_terminates_the_process() -> None:
    """Cancelling the executor (RunCancelled, lease loss) stops the process before returning."""
    sink = Sink()
    script = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)\n"
    task = asyncio.create_task(_process({"argv": [PY, "-c", script]}).run(_ctx(sink)))
    async with asyncio.timeout(10):
        await sink.written.wait()
    pid = int(sink.text.split()[0])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until_gone(pid)


async def test_killed_by_signal_is_retryable() -> None:
    """Death by a signal (e.g. the OOM killer's SIGKILL) is a retryable failure."""
    result = await _process(
        {"argv": [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]}
    ).run(_ctx(Sink()))
    assert result.error_class == "Signal"
    assert "SIGKILL" in result.error_message
    assert result.retryable


async def _until_gone(pid: int) -> None:
    async with asyncio.timeout(10):
        while _alive(pid):  # noqa: ASYNC110 - another process's exit has no event to await
            await asyncio.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


def test_container_argv_passes_env_by_name_only() -> None:
    """The container command line is runtime + name/labels + --env NAME... + image + args, no values."""
    ctx = _ctx(Sink())
    argv = container_argv(
        ("podman", "run", "--rm"), "img:1", ["--flag"], ["API_KEY", "TICKWHEEL_RUN_ID"], ctx
    )
    assert argv == (
        "podman",
        "run",
        "--rm",
        "--name",
        "tickwheel-r-1-3",
        "--label",
        "tickwheel.run_id=r-1",
        "--label",
        "tickwheel.attempt=3",
        "--env",
        "API_KEY",
        "--env",
        "TICKWHEEL_RUN_ID",
        "img:1",
        "--flag",
    )


async def test_container_executor_runs_the_configured_runtime(tmp_path: Path) -> None:
    """The runtime comes from worker config; values reach the runtime's env, never its argv."""
    fake_runtime = tmp_path / "fake-runtime"
    fake_runtime.write_text(
        f"#!{PY}\nimport os, sys\nprint(sys.argv[1:])\nprint('KEY=' + os.environ['API_KEY'])\n"
    )
    fake_runtime.chmod(0o755)
    env = _env(container_runtime=(str(fake_runtime), "run"))
    executor = env.registry.build(
        "container", {"image": "img:1", "args": ["a"], "env": {"API_KEY": "v"}}, env
    )
    sink = Sink()
    result = await executor.run(_ctx(sink))
    assert result.ok
    assert "KEY=v" in sink.text
    assert "'--env', 'API_KEY'" in sink.text
    assert "'v'" not in sink.text
    with pytest.raises(ExecutorConfigError, match="image"):
        env.registry.build("container", {"args": []}, env)
