"""The ``workflow`` executor: an ordered chain of executor steps inside one run attempt.

Config (JSON object)::

    {"steps": [
        {"name": "extract", "kind": "http", "config": {...},
         "retry": {"max_attempts": 3, "backoff_ms": 1000}},
        {"name": "load", "kind": "process", "config": {...}}]}

Steps run in order. A step that fails retryably is retried up to its ``max_attempts``
(default 1) with ``backoff_ms`` doubling per retry, inside the same attempt and lease. The
first step that still fails stops the chain; the run fails with that step's error class,
a message naming the step (``step 2/3 'load' failed after 1 attempt(s): ...``) and that
step's retryability. Each step's result (an HTTP body, a process's last output) is handed
to the next: as ``TICKWHEEL_PREVIOUS_RESULT`` to a process, as the JSON body field named by
``previous_result_field`` to an HTTP step. The workflow's result is the last step's.

Each step gets its own idempotency key, ``<run_id>/<step name>``, stable across the step's
retries and across attempts of the run, so a target sees a repeated step as a repeat.
Workflows do not nest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tickwheel.workers.executors.base import (
    ExecResult,
    Executor,
    ExecutorConfigError,
    ExecutorEnv,
    RunContext,
    get_int,
    get_str,
)

MAX_STEPS = 50


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    kind: str
    executor: Executor
    max_attempts: int
    backoff_ms: int


def parse_steps(config: Mapping[str, Any], env: ExecutorEnv) -> tuple[Step, ...]:
    raw = config.get("steps")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_STEPS:
        raise ExecutorConfigError(f"config field 'steps' must be a list of 1..{MAX_STEPS} steps")
    steps = tuple(_step(index, item, env) for index, item in enumerate(raw, 1))
    names = [step.name for step in steps]
    if len(set(names)) != len(names):
        raise ExecutorConfigError("workflow step names must be unique")
    return steps


def _step(index: int, item: Any, env: ExecutorEnv) -> Step:
    if not isinstance(item, dict):
        raise ExecutorConfigError(f"workflow step {index} must be a JSON object")
    try:
        return _checked_step(index, item, env)
    except ExecutorConfigError as exc:
        raise ExecutorConfigError(f"workflow step {index}: {exc}") from None


def _checked_step(index: int, item: dict[str, Any], env: ExecutorEnv) -> Step:
    name = get_str(item, "name", f"step-{index}")
    kind = get_str(item, "kind")
    if kind == "workflow":
        raise ExecutorConfigError("workflows do not nest")
    retry = item.get("retry", {})
    if not isinstance(retry, dict):
        raise ExecutorConfigError("config field 'retry' must be an object")
    executor = env.registry.build(kind, item.get("config", {}), env)
    attempts = get_int(retry, "max_attempts", 1, minimum=1)
    return Step(name, kind, executor, attempts, get_int(retry, "backoff_ms", 1_000))


def create(config: Mapping[str, Any], env: ExecutorEnv) -> WorkflowExecutor:
    return WorkflowExecutor(parse_steps(config, env), env)


class WorkflowExecutor:
    def __init__(self, steps: tuple[Step, ...], env: ExecutorEnv) -> None:
        self.steps = steps
        self._sleep = env.sleep

    async def run(self, ctx: RunContext) -> ExecResult:
        previous = ctx.previous_result
        for index, step in enumerate(self.steps, 1):
            result, tries = await self._run_step(ctx, index, step, previous)
            if not result.ok:
                where = f"step {index}/{len(self.steps)} {step.name!r} failed after {tries} attempt(s)"
                return ExecResult.failure(
                    result.error_class, f"{where}: {result.error_message}", retryable=result.retryable
                )
            previous = result.result
        return ExecResult.success(previous or "")

    async def _run_step(
        self, ctx: RunContext, index: int, step: Step, previous: str | None
    ) -> tuple[ExecResult, int]:
        step_ctx = replace(
            ctx, idempotency_key=f"{ctx.idempotency_key}/{step.name}", previous_result=previous
        )
        for tries in range(1, step.max_attempts + 1):
            ctx.output.write(
                f"== step {index}/{len(self.steps)} {step.name!r} ({step.kind}) "
                f"try {tries}/{step.max_attempts} ==\n"
            )
            result = await step.executor.run(step_ctx)
            if result.ok or not result.retryable or tries == step.max_attempts:
                return result, tries
            ctx.output.write(
                f"== step {step.name!r} failed: {result.error_class}: {result.error_message} ==\n"
            )
            await self._sleep(step.backoff_ms * 2 ** (tries - 1) / 1000)
        raise AssertionError("unreachable: the last try returns")
