"""The ``process`` executor: run an argv list in its own process group.

Config (JSON object)::

    {"argv": ["/usr/bin/backup", "--full"],   required; a list, never a shell string
     "env": {"TARGET": "s3://bucket"},        added to a minimal base environment
     "cwd": "/srv/backup",
     "timeout_ms": 600000,                    optional; the job's timeout applies anyway
     "kill_grace_ms": 5000,                   SIGTERM -> SIGKILL, default from WorkerConfig
     "retryable": true,                       whether a non-zero exit may be retried
     "non_retryable_exit_codes": [2]}

The child never inherits the worker's environment (it holds ``TICKWHEEL_SECRET_*``): it gets
``PATH``, ``LANG``, ``LC_ALL``, ``TZ`` and ``HOME`` from the worker, the config's ``env``,
and ``TICKWHEEL_RUN_ID``, ``TICKWHEEL_ATTEMPT`` (the fencing token), ``TICKWHEEL_JOB_ID``,
``TICKWHEEL_IDEMPOTENCY_KEY`` and, inside a workflow, ``TICKWHEEL_PREVIOUS_RESULT``.

stdout and stderr are merged into one pipe (in arrival order, as ``2>&1`` would) and
captured. The process leads its own session/process group; on cancel or timeout the whole
group gets SIGTERM, then SIGKILL after the grace period. When the main process exits, any
member of its group still running is killed too: a run leaves nothing behind.

Exit 0 succeeds with the tail of the output as result; a non-zero exit fails (retryable
unless configured otherwise); death by a signal fails retryably.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tickwheel.workers.executors.base import (
    ExecResult,
    ExecutorConfigError,
    ExecutorEnv,
    RunContext,
    get_bool,
    get_int,
    get_str_list,
    get_str_map,
)

INHERITED_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "HOME")
_READ_BLOCK = 4096
_DRAIN_S = 2.0  # after exit, how long the pipe may take to reach EOF


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None
    timeout_ms: int | None
    kill_grace_ms: int
    retryable: bool
    non_retryable_exit_codes: frozenset[int]
    result_max_bytes: int


def parse_config(config: Mapping[str, Any], env: ExecutorEnv) -> ProcessConfig:
    if isinstance(config.get("argv"), str):
        raise ExecutorConfigError("config field 'argv' must be a list of strings, never a shell string")
    cwd = config.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ExecutorConfigError("config field 'cwd' must be a string")
    codes = config.get("non_retryable_exit_codes", [])
    if not isinstance(codes, list) or not all(isinstance(c, int) for c in codes):
        raise ExecutorConfigError("config field 'non_retryable_exit_codes' must be a list of integers")
    timeout = get_int(config, "timeout_ms", 0)
    return ProcessConfig(
        argv=tuple(get_str_list(config, "argv", required=True)),
        env=get_str_map(config, "env"),
        cwd=cwd,
        timeout_ms=timeout or None,
        kill_grace_ms=get_int(config, "kill_grace_ms", env.config.kill_grace_ms),
        retryable=get_bool(config, "retryable", True),
        non_retryable_exit_codes=frozenset(codes),
        result_max_bytes=env.config.result_max_bytes,
    )


def create(config: Mapping[str, Any], env: ExecutorEnv) -> ProcessExecutor:
    return ProcessExecutor(parse_config(config, env))


def child_env(
    config_env: Mapping[str, str], ctx: RunContext, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of the child: never the worker's own (it holds secrets)."""
    source = os.environ if base is None else base
    env = {name: source[name] for name in INHERITED_ENV if name in source}
    env.update(config_env)
    env.update(run_env(ctx))
    return env


def run_env(ctx: RunContext) -> dict[str, str]:
    """The variables that tell a process which attempt it is (they win over the config's)."""
    env = {
        "TICKWHEEL_RUN_ID": ctx.run_id,
        "TICKWHEEL_ATTEMPT": str(ctx.attempt),
        "TICKWHEEL_JOB_ID": ctx.job_id,
        "TICKWHEEL_IDEMPOTENCY_KEY": ctx.idempotency_key,
    }
    if ctx.previous_result is not None:
        env["TICKWHEEL_PREVIOUS_RESULT"] = ctx.previous_result
    return env


class ProcessExecutor:
    def __init__(self, config: ProcessConfig) -> None:
        self.config = config

    async def run(self, ctx: RunContext) -> ExecResult:
        return await self.run_argv(ctx, self.config.argv, child_env(self.config.env, ctx))

    async def run_argv(self, ctx: RunContext, argv: tuple[str, ...], env: Mapping[str, str]) -> ExecResult:
        """Run ``argv`` with exactly ``env`` (the container executor builds its own)."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                cwd=self.config.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            return ExecResult.failure("SpawnFailed", f"cannot start {argv[0]!r}: {exc}", retryable=False)
        tail = _Tail(self.config.result_max_bytes)
        assert proc.stdout is not None
        pump = asyncio.create_task(_pump(proc.stdout, ctx, tail))
        try:
            returncode = await self._wait(proc)
        except BaseException:
            await asyncio.shield(self._terminate(proc))
            raise
        finally:
            _kill_group(proc, signal.SIGKILL)  # whatever the leader left running
            await _finish(pump)
        if returncode is None:
            return ExecResult.failure("Timeout", f"killed after {self.config.timeout_ms} ms", retryable=True)
        return self._result(returncode, tail.text())

    async def _wait(self, proc: asyncio.subprocess.Process) -> int | None:
        """The exit status, or None when the config's timeout expired (the group was stopped)."""
        if self.config.timeout_ms is None:
            return await proc.wait()
        try:
            async with asyncio.timeout(self.config.timeout_ms / 1000):
                return await proc.wait()
        except TimeoutError:
            await self._terminate(proc)
            return None

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM to the group, SIGKILL after the grace period, and reap the leader."""
        if proc.returncode is not None:
            return
        _kill_group(proc, signal.SIGTERM)
        try:
            async with asyncio.timeout(self.config.kill_grace_ms / 1000):
                await proc.wait()
        except TimeoutError:
            _kill_group(proc, signal.SIGKILL)
            await proc.wait()

    def _result(self, returncode: int, tail: str) -> ExecResult:
        if returncode == 0:
            return ExecResult.success(tail.strip())
        if returncode < 0:
            name = _signal_name(-returncode)
            return ExecResult.failure("Signal", f"process killed by {name}", retryable=True)
        retryable = self.config.retryable and returncode not in self.config.non_retryable_exit_codes
        return ExecResult.failure(
            "ExitStatus", f"process exited with status {returncode}", retryable=retryable
        )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    # The group id is the leader's pid (start_new_session); it outlives the leader while
    # any member lives, and cannot be reused until every member is gone.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def _pump(stream: asyncio.StreamReader, ctx: RunContext, tail: _Tail) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while block := await stream.read(_READ_BLOCK):
        text = decoder.decode(block)
        ctx.output.write(text)
        tail.add(text)
    rest = decoder.decode(b"", final=True)
    if rest:
        ctx.output.write(rest)
        tail.add(rest)


async def _finish(pump: asyncio.Task[None]) -> None:
    """Let the output reader reach EOF (bounded), then stop it."""
    await asyncio.wait({pump}, timeout=_DRAIN_S)
    pump.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await pump


class _Tail:
    """The last ``limit`` characters of a stream: a process's result is its last words."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._text = ""

    def add(self, text: str) -> None:
        self._text = (self._text + text)[-self.limit :] if self.limit else ""

    def text(self) -> str:
        return self._text
