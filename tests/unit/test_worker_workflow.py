"""The workflow executor: step order, per-step retry, result hand-over, failure naming the step."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import (
    ExecResult,
    ExecutorConfigError,
    ExecutorEnv,
    RunContext,
    builtin_registry,
)
from tickwheel.workers.ssrf import SsrfGuard, system_resolve


class Sink:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text


class Scripted:
    """A test executor that answers from a script and records what it was given."""

    calls: ClassVar[list[tuple[str, str | None, str]]] = []

    def __init__(self, config: Mapping[str, Any], env: ExecutorEnv) -> None:
        self.name = str(config["name"])
        self.answers = list(config.get("answers", []))

    async def run(self, ctx: RunContext) -> ExecResult:
        Scripted.calls.append((self.name, ctx.previous_result, ctx.idempotency_key))
        answer = self.answers.pop(0) if self.answers else "ok"
        if answer == "ok":
            return ExecResult.success(f"{self.name}-result")
        return ExecResult.failure("Boom", f"{self.name} broke", retryable=answer == "retry")


def _env() -> tuple[ExecutorEnv, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    registry = builtin_registry()
    registry.register("scripted", Scripted)
    return ExecutorEnv(WorkerConfig(worker_id="w"), SsrfGuard((), system_resolve), registry, sleep), slept


def _step(name: str, answers: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kind": "scripted", "config": {"name": name, "answers": answers or []}, **extra}


@pytest.fixture(autouse=True)
def _reset() -> None:
    Scripted.calls = []


async def test_steps_run_in_order_passing_results_on() -> None:
    """Each step gets its predecessor's result and its own idempotency key; the last result wins."""
    env, _ = _env()
    workflow = env.registry.build("workflow", {"steps": [_step("a"), _step("b"), _step("c")]}, env)
    sink = Sink()
    result = await workflow.run(RunContext("r-9", "j", 1, "t", sink, "r-9", None))
    assert result == ExecResult.success("c-result")
    assert Scripted.calls == [("a", None, "r-9/a"), ("b", "a-result", "r-9/b"), ("c", "b-result", "r-9/c")]
    assert "== step 2/3 'b' (scripted) try 1/1 ==" in sink.text


async def test_retryable_step_failure_is_retried_with_backoff() -> None:
    """A step failing retryably is tried up to max_attempts with doubling backoff."""
    env, slept = _env()
    steps = [_step("a", ["retry", "retry", "ok"], retry={"max_attempts": 3, "backoff_ms": 100}), _step("b")]
    result = await env.registry.build("workflow", {"steps": steps}, env).run(
        RunContext("r", "j", 1, "t", Sink(), "r")
    )
    assert result.ok
    assert [name for name, _, _ in Scripted.calls] == ["a", "a", "a", "b"]
    assert slept == [0.1, 0.2]


async def test_failing_step_stops_the_chain_and_is_named() -> None:
    """The first step that still fails ends the workflow; the error names it and keeps its class."""
    env, _ = _env()
    steps = [_step("extract"), _step("load", ["fail"], retry={"max_attempts": 3}), _step("notify")]
    result = await env.registry.build("workflow", {"steps": steps}, env).run(
        RunContext("r", "j", 1, "t", Sink(), "r")
    )
    assert not result.ok
    assert not result.retryable
    assert result.error_class == "Boom"
    assert result.error_message == "step 2/3 'load' failed after 1 attempt(s): load broke"
    assert [name for name, _, _ in Scripted.calls] == ["extract", "load"]


async def test_real_process_steps_hand_over_through_the_environment() -> None:
    """A process step sees the previous step's result as TICKWHEEL_PREVIOUS_RESULT."""
    env, _ = _env()
    steps = [
        {"name": "one", "kind": "process", "config": {"argv": [sys.executable, "-c", "print('42')"]}},
        {
            "name": "two",
            "kind": "process",
            "config": {
                "argv": [
                    sys.executable,
                    "-c",
                    "import os; print(int(os.environ['TICKWHEEL_PREVIOUS_RESULT']) + 1)",
                ]
            },
        },
    ]
    result = await env.registry.build("workflow", {"steps": steps}, env).run(
        RunContext("r", "j", 1, "t", Sink(), "r")
    )
    assert result == ExecResult.success("43")


def test_bad_workflow_configs_name_the_step() -> None:
    """Config errors say which step; nesting and duplicate names are refused."""
    env, _ = _env()
    with pytest.raises(ExecutorConfigError, match="workflow step 2: unknown executor kind 'nope'"):
        env.registry.build("workflow", {"steps": [_step("a"), {"kind": "nope"}]}, env)
    with pytest.raises(ExecutorConfigError, match="do not nest"):
        env.registry.build("workflow", {"steps": [{"kind": "workflow", "config": {}}]}, env)
    with pytest.raises(ExecutorConfigError, match="unique"):
        env.registry.build("workflow", {"steps": [_step("a"), _step("a")]}, env)
    with pytest.raises(ExecutorConfigError, match="steps"):
        env.registry.build("workflow", {"steps": []}, env)
