"""The ``container`` executor: a container runtime command run through the process executor.

Config (JSON object)::

    {"image": "registry.example.com/reports:1.4",   required
     "args": ["--since", "yesterday"],              after the image
     "env": {"REPORT_TOKEN": {"secret": "REPORTS"}},
     "timeout_ms": 600000, "kill_grace_ms": 10000, "retryable": true}

The runtime command comes from the worker, never from the job:
``WorkerConfig.container_runtime`` (default ``["podman", "run", "--rm"]``). The argv is::

    <runtime...> --name tickwheel-<run_id>-<attempt>
                 --label tickwheel.run_id=<run_id> --label tickwheel.attempt=<attempt>
                 --env NAME ... <image> <args...>

Environment values are never put on the command line (anyone on the host can read argv):
``--env NAME`` without a value makes docker/podman copy NAME from the runtime process's own
environment, which the process executor sets to exactly the config's env plus the
``TICKWHEEL_*`` run variables. Cancel and timeout signal the runtime client (SIGTERM, then
SIGKILL); with ``--rm`` and signal proxying (podman and docker default) the container stops
with it. A SIGKILLed client can leave the container running: an operator's reaper should
remove containers labelled ``tickwheel.run_id`` whose run is settled. No container runtime
exists in the test environment: only the argv construction is tested.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from tickwheel.workers.executors.base import (
    ExecResult,
    ExecutorEnv,
    RunContext,
    get_str,
    get_str_list,
    get_str_map,
)
from tickwheel.workers.executors.process import INHERITED_ENV, ProcessExecutor, parse_config, run_env


def container_argv(
    runtime: Sequence[str], image: str, args: Sequence[str], env_names: Sequence[str], ctx: RunContext
) -> tuple[str, ...]:
    """The full command line; ``env_names`` are passed by name only."""
    labels = (f"tickwheel.run_id={ctx.run_id}", f"tickwheel.attempt={ctx.attempt}")
    return (
        *runtime,
        "--name",
        f"tickwheel-{ctx.run_id}-{ctx.attempt}",
        *(part for label in labels for part in ("--label", label)),
        *(part for name in env_names for part in ("--env", name)),
        image,
        *args,
    )


class ContainerExecutor:
    def __init__(
        self, runtime: Sequence[str], image: str, args: Sequence[str], process: ProcessExecutor
    ) -> None:
        self.runtime = tuple(runtime)
        self.image = image
        self.args = tuple(args)
        self.process = process

    async def run(self, ctx: RunContext) -> ExecResult:
        container_env = {**self.process.config.env, **run_env(ctx)}
        argv = container_argv(self.runtime, self.image, self.args, sorted(container_env), ctx)
        # The runtime client itself needs PATH/HOME; the container sees only the named vars.
        inherited = {name: os.environ[name] for name in INHERITED_ENV if name in os.environ}
        return await self.process.run_argv(ctx, argv, inherited | container_env)


def create(config: Mapping[str, Any], env: ExecutorEnv) -> ContainerExecutor:
    image = get_str(config, "image")
    args = get_str_list(config, "args")
    process_config = {
        key: config[key] for key in ("env", "timeout_ms", "kill_grace_ms", "retryable") if key in config
    }
    get_str_map(config, "env")  # validated here so the error names the container config
    process = ProcessExecutor(
        parse_config({**process_config, "argv": [env.config.container_runtime[0]]}, env)
    )
    return ContainerExecutor(env.config.container_runtime, image, args, process)
