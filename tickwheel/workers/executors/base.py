"""The executor contract: what a worker hands an executor, and what it gets back.

An executor turns one run attempt into an effect. It is built per attempt from the job's
``ExecutorSpec`` (``kind`` picks the factory, ``config_json`` with secrets already resolved
is its configuration) and then awaited once with a :class:`RunContext`. Executors must be
cancellation-safe: the worker cancels the task on RunCancelled, timeout, lease loss or
shutdown, and the executor must have stopped its effect (aborted the request, killed the
process group) by the time the cancellation propagates.

An executor reports failure by returning ``ExecResult.failure(...)``; it raises only for
bugs. A bad configuration raises :class:`ExecutorConfigError` from the factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.ssrf import SsrfGuard


class ExecutorConfigError(ValueError):
    """An executor config that cannot run; the message names the field."""


class OutputSink(Protocol):
    def write(self, text: str) -> None: ...


@dataclass(frozen=True, slots=True)
class RunContext:
    """One attempt, as an executor sees it."""

    run_id: str
    job_id: str
    attempt: int  # the fencing token: a target refuses effects from an older attempt
    team: str
    output: OutputSink
    idempotency_key: str  # run_id for a job's executor; run_id/step for a workflow step
    previous_result: str | None = None  # a workflow step gets its predecessor's result


@dataclass(frozen=True, slots=True)
class ExecResult:
    ok: bool
    result: str = ""
    retryable: bool = False
    error_class: str = ""
    error_message: str = ""

    @classmethod
    def success(cls, result: str = "") -> ExecResult:
        return cls(ok=True, result=result)

    @classmethod
    def failure(cls, error_class: str, message: str, *, retryable: bool) -> ExecResult:
        return cls(ok=False, retryable=retryable, error_class=error_class, error_message=message)


class Executor(Protocol):
    async def run(self, ctx: RunContext) -> ExecResult: ...


@dataclass(frozen=True)
class ExecutorEnv:
    """What the worker lends every executor it builds."""

    config: WorkerConfig
    guard: SsrfGuard
    registry: ExecutorRegistry
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)


ExecutorFactory = Callable[[Mapping[str, Any], ExecutorEnv], Executor]


class ExecutorRegistry:
    """Executor kinds by name; a deployment adds its own with :meth:`register`."""

    def __init__(self, factories: Mapping[str, ExecutorFactory] | None = None) -> None:
        self._factories: dict[str, ExecutorFactory] = dict(factories or {})

    def register(self, kind: str, factory: ExecutorFactory, *, replace: bool = False) -> None:
        if kind in self._factories and not replace:
            raise ValueError(f"executor kind {kind!r} is already registered")
        self._factories[kind] = factory

    def kinds(self) -> Iterator[str]:
        return iter(sorted(self._factories))

    def copy(self) -> ExecutorRegistry:
        return ExecutorRegistry(self._factories)

    def build(self, kind: str, config: Any, env: ExecutorEnv) -> Executor:
        factory = self._factories.get(kind)
        if factory is None:
            raise ExecutorConfigError(f"unknown executor kind {kind!r} (known: {', '.join(self.kinds())})")
        if not isinstance(config, Mapping):
            raise ExecutorConfigError(f"{kind} executor config must be a JSON object")
        return factory(config, env)


# -- typed access to a JSON config ------------------------------------------------------


def _wrong(key: str, expected: str) -> ExecutorConfigError:
    return ExecutorConfigError(f"config field {key!r} must be {expected}")


def get_str(config: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """``config[key]`` as a string; without a default the field is required."""
    if key not in config and default is None:
        raise ExecutorConfigError(f"config field {key!r} is required")
    value = config.get(key, default)
    if not isinstance(value, str):
        raise _wrong(key, "a string")
    return value


def get_int(config: Mapping[str, Any], key: str, default: int, *, minimum: int = 0) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _wrong(key, f"an integer >= {minimum}")
    return value


def get_bool(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise _wrong(key, "true or false")
    return value


def get_str_map(config: Mapping[str, Any], key: str) -> dict[str, str]:
    value = config.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise _wrong(key, "an object of string values")
    return {str(k): v for k, v in value.items()}


def get_str_list(config: Mapping[str, Any], key: str, *, required: bool = False) -> list[str]:
    value = config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _wrong(key, "a list of strings")
    if required and not value:
        raise ExecutorConfigError(f"config field {key!r} must not be empty")
    return list(value)
