"""The ``noop`` executor: succeeds (after ``sleep_ms``, default 0), for tests and benchmarks.

Config: ``{"sleep_ms": 0, "fail": false, "retryable": true, "result": ""}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tickwheel.workers.executors.base import ExecResult, ExecutorEnv, RunContext, get_bool, get_int, get_str


class NoopExecutor:
    def __init__(self, config: Mapping[str, Any], env: ExecutorEnv) -> None:
        self.sleep_ms = get_int(config, "sleep_ms", 0)
        self.fail = get_bool(config, "fail", False)
        self.retryable = get_bool(config, "retryable", True)
        self.result = get_str(config, "result", "")
        self._sleep = env.sleep

    async def run(self, ctx: RunContext) -> ExecResult:
        if self.sleep_ms:
            await self._sleep(self.sleep_ms / 1000)
        if self.fail:
            return ExecResult.failure("NoopFailure", "configured to fail", retryable=self.retryable)
        return ExecResult.success(self.result)
