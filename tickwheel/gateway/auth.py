"""API tokens: who is calling, for which team, in which role.

Tokens come from a JSON file (``TICKWHEEL_TOKENS_FILE``), the ``TICKWHEEL_GATEWAY_TOKENS``
variable (same JSON), and ``TICKWHEEL_TOKEN`` (one bootstrap admin token, what
``tickwheel up`` prints). The JSON is a list of entries::

    [{"token": "...", "principal": "alice", "team": "payments", "role": "owner"}]

Only SHA-256 digests of tokens are kept in memory. :meth:`TokenTable.authenticate`
compares the caller's digest with *every* entry in constant time and never stops early,
so response time says nothing about how close a guess was or where it matched.

Roles: a ``viewer`` reads its team's objects; an ``owner`` also changes them; an ``admin``
reads and changes every team's. Everything else is refused, and objects of another team
are reported as not found, so a token cannot probe which ids exist elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from tickwheel.gateway.models import TEAM_PATTERN

MIN_TOKEN_LENGTH = 16


class Role(StrEnum):
    VIEWER = "viewer"
    OWNER = "owner"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller."""

    name: str
    team: str
    role: Role

    def can_read(self, team: str) -> bool:
        return self.role is Role.ADMIN or team == self.team

    def can_write(self, team: str) -> bool:
        return self.role is Role.ADMIN or (self.role is Role.OWNER and team == self.team)


class TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    token: str = Field(min_length=MIN_TOKEN_LENGTH, max_length=512)
    principal: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._@:+-]+$")
    team: str = Field(pattern=TEAM_PATTERN)
    role: Role


_ENTRIES = TypeAdapter(list[TokenEntry])


class TokenError(ValueError):
    """A token source that cannot be used."""


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class TokenTable:
    """Digests of the configured tokens and whom each one names."""

    def __init__(self, entries: Iterable[TokenEntry]) -> None:
        self._entries = [(_digest(e.token), Principal(e.principal, e.team, e.role)) for e in entries]

    def __len__(self) -> int:
        return len(self._entries)

    @classmethod
    def parse(cls, text: str, source: str) -> list[TokenEntry]:
        try:
            return _ENTRIES.validate_json(text)
        except ValidationError as exc:
            raise TokenError(f"{source}: not a list of token entries: {exc.errors()[0]['msg']}") from None

    @classmethod
    def load(cls, *, file: Path | None, env_json: str | None, admin_token: str | None) -> TokenTable:
        """Every configured token: file, then environment JSON, then the bootstrap admin token."""
        entries: list[TokenEntry] = []
        if file is not None:
            try:
                text = file.read_text(encoding="utf-8")
            except OSError as exc:
                raise TokenError(f"cannot read tokens file {file}: {exc.strerror}") from None
            entries += cls.parse(text, str(file))
        if env_json:
            entries += cls.parse(env_json, "TICKWHEEL_GATEWAY_TOKENS")
        if admin_token:
            try:
                admin = TokenEntry(token=admin_token, principal="admin", team="admin", role=Role.ADMIN)
            except ValidationError:
                raise TokenError(f"TICKWHEEL_TOKEN must be at least {MIN_TOKEN_LENGTH} characters") from None
            entries.append(admin)
        digests = [_digest(e.token) for e in entries]
        if len(set(digests)) != len(digests):
            raise TokenError("the same token is configured twice")
        return cls(entries)

    def authenticate(self, token: str) -> Principal | None:
        """The principal ``token`` names, or None. Constant time in the token's content."""
        given = _digest(token)
        found: Principal | None = None
        for digest, principal in self._entries:
            if hmac.compare_digest(given, digest):
                found = principal
        return found


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None if malformed."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512 or not token.isprintable():
        return None
    return token


def example_tokens_json(entries: Iterable[tuple[str, str, str, Role]]) -> str:
    """A tokens file text, for tests and for ``tickwheel up`` to write."""
    rows = [{"token": t, "principal": p, "team": team, "role": r.value} for t, p, team, r in entries]
    return json.dumps(rows)
