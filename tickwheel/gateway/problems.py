"""RFC 9457 problem details: every error the gateway returns is one of these.

A handler raises :class:`ProblemError`; the error middleware renders it as
``application/problem+json`` with the request id and the instance path. ``field`` names the
input at fault in the API's own spelling (``schedule.expr``, ``Idempotency-Key``,
``cursor``), so a client or the UI can point at it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

PROBLEM_JSON = "application/problem+json"
TYPE_PREFIX = "urn:tickwheel:problem:"

_TITLES = {
    400: "Bad request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    412: "Precondition failed",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    428: "Precondition required",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str
    message: str


class ProblemError(Exception):
    """An error answer. ``kind`` is the short problem type (``validation``, ``not-found`` ...)."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str = "",
        *,
        field: str | None = None,
        errors: Sequence[FieldError] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.field = field
        self.errors = tuple(errors)
        self.headers = dict(headers or {})

    def __str__(self) -> str:
        return f"{self.status} {self.kind}: {self.detail}"

    def body(self, instance: str, request_id: str) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "type": TYPE_PREFIX + self.kind,
            "title": _TITLES.get(self.status, "Error"),
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            "request_id": request_id,
        }
        if self.field is not None:
            doc["field"] = self.field
        if self.errors:
            doc["errors"] = [{"field": e.field, "message": e.message} for e in self.errors]
        return doc


def render(problem: ProblemError, instance: str, request_id: str) -> web.Response:
    """The HTTP response for ``problem``."""
    return web.Response(
        status=problem.status,
        body=json.dumps(problem.body(instance, request_id)).encode(),
        content_type=PROBLEM_JSON,
        headers=dict(problem.headers),
    )


def not_found(what: str, field_name: str | None = None) -> ProblemError:
    return ProblemError(404, "not-found", f"{what} not found", field=field_name)


def validation(field_name: str, message: str, status: int = 422) -> ProblemError:
    errors = (FieldError(field_name, message),)
    return ProblemError(status, "validation", message, field=field_name, errors=errors)


def forbidden(detail: str) -> ProblemError:
    return ProblemError(403, "forbidden", detail)
