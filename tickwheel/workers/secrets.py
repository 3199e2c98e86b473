"""Secret references in executor configs: resolved only on the worker, scrubbed from output.

A job's ``ExecutorSpec.config_json`` travels through ``commands``, ``runs`` and the state
changelog, so it may hold only *references*: a JSON object ``{"secret": "NAME"}`` anywhere
in the config is replaced, on the worker and in memory only, by the value of secret NAME.
``{"secret": "NAME", "template": "Bearer {}"}`` substitutes the value for ``{}``.

Values come from the worker's own configuration: the environment variable
``TICKWHEEL_SECRET_<NAME>`` (NAME upper-cased, other characters than letters and digits
turned into ``_``) or, failing that, the JSON object in ``WorkerConfig.secrets_file``.

Whatever the executor prints or returns is scrubbed of the values it was given (and of
their URL- and JSON-escaped forms) before it reaches a topic or a log line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

ENV_PREFIX = "TICKWHEEL_SECRET_"
MASK = "***"
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class SecretNotFound(LookupError):  # noqa: N818 - reads as the outcome it reports
    """A config referenced a secret this worker does not have (the message names it)."""


def env_name(name: str) -> str:
    """The environment variable that holds secret ``name``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper()


class SecretStore:
    """The secrets this worker may hand to executors. Its repr shows names, never values."""

    def __init__(
        self, file_values: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
    ):
        self._file = dict(file_values or {})
        self._environ = os.environ if environ is None else environ

    @classmethod
    def load(cls, secrets_file: Path | None, environ: Mapping[str, str] | None = None) -> SecretStore:
        """The environment plus, when given, a JSON file of name -> value."""
        values: dict[str, str] = {}
        if secrets_file is not None:
            raw = json.loads(secrets_file.read_text())
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                raise ValueError(f"{secrets_file}: expected a JSON object of name -> string")
            values = {str(k): v for k, v in raw.items()}
        return cls(values, environ)

    def get(self, name: str) -> str:
        if not _NAME.match(name):
            raise SecretNotFound(f"invalid secret name {name!r}")
        value = self._environ.get(env_name(name), self._file.get(name))
        if value is None:
            raise SecretNotFound(f"secret {name!r} is not configured on this worker")
        return value

    def __repr__(self) -> str:
        return f"SecretStore(file_names={sorted(self._file)})"


def is_reference(value: Any) -> bool:
    """Whether ``value`` is a secret reference object."""
    if not isinstance(value, dict) or not isinstance(value.get("secret"), str):
        return False
    return set(value) <= {"secret", "template"} and isinstance(value.get("template", "{}"), str)


def resolve(config: Any, store: SecretStore) -> tuple[Any, tuple[str, ...]]:
    """``config`` with every reference replaced, and the secret values used (for scrubbing)."""
    used: list[str] = []

    def walk(value: Any) -> Any:
        if is_reference(value):
            secret = store.get(value["secret"])
            used.append(secret)
            return str(value.get("template", "{}")).replace("{}", secret)
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(config), tuple(dict.fromkeys(used))


class Scrubber:
    """Replaces secret values (and their escaped forms) in text with ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {form for secret in secrets if secret for form in _forms(secret)}
        # Longest first, so a secret that contains another is masked whole.
        self.patterns = tuple(sorted(forms, key=len, reverse=True))
        self._regex = re.compile("|".join(map(re.escape, self.patterns))) if self.patterns else None

    @property
    def longest(self) -> int:
        return len(self.patterns[0]) if self.patterns else 0

    def scrub(self, text: str) -> str:
        return text if self._regex is None else self._regex.sub(MASK, text)

    def safe_cut(self, text: str) -> int:
        """How much of a growing stream's ``text`` can be scrubbed and emitted now.

        The rest may be the beginning of a secret whose end has not arrived yet; the cut
        never falls inside an occurrence that is already complete.
        """
        if self._regex is None:
            return len(text)
        cut = max(0, len(text) - (self.longest - 1))
        for match in self._regex.finditer(text):
            if match.start() < cut < match.end():
                cut = match.end()
        return cut


def _forms(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}
