"""Structured (JSON lines) logging for every service, with run and job ids when known."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_EXTRA_FIELDS = ("run_id", "job_id", "attempt", "partition", "worker_id", "team")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and any known ids."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                entry[name] = getattr(record, name)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str | None = None) -> None:
    """Send JSON logs to stderr at ``TICKWHEEL_LOG_LEVEL`` (default INFO)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level or os.environ.get("TICKWHEEL_LOG_LEVEL", "INFO").upper())
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
