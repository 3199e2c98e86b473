"""Workers: consume committed RunDue, take a lease, execute, report outcomes and logs.

Public surface: :class:`Worker`, :class:`WorkerConfig`, :func:`register_executor` and the
executor contract (:class:`Executor`, :class:`RunContext`, :class:`ExecResult`).
"""

from tickwheel.workers.config import WorkerConfig
from tickwheel.workers.executors import (
    ExecResult,
    Executor,
    ExecutorConfigError,
    ExecutorEnv,
    ExecutorRegistry,
    RunContext,
    default_registry,
    register_executor,
)

__all__ = [
    "ExecResult",
    "Executor",
    "ExecutorConfigError",
    "ExecutorEnv",
    "ExecutorRegistry",
    "RunContext",
    "Worker",
    "WorkerConfig",
    "default_registry",
    "register_executor",
]


def __getattr__(name: str) -> object:
    # Worker pulls in aiokafka; import it only when asked for.
    if name == "Worker":
        from tickwheel.workers.worker import Worker

        return Worker
    raise AttributeError(name)
