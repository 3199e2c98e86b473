"""The OpenAPI 3.1 document, generated from the route table and the pydantic models.

OpenAPI 3.1 schemas are JSON Schema 2020-12, which is what pydantic emits, so model
schemas go into ``components/schemas`` unchanged. Request bodies and query parameters use
the models' *validation* schemas, responses their *serialization* schemas.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from tickwheel.gateway.context import Route
from tickwheel.gateway.models import JOB_ID_PATTERN, STATIC_NAME_PATTERN, ProblemOut
from tickwheel.gateway.problems import PROBLEM_JSON

REF = "#/components/schemas/{model}"
_PATH_PARAM = re.compile(r"{([a-z_]+)}")
_DESCRIPTIONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    400: "Malformed request (text/plain when the HTTP parser refused it, before the app)",
    401: "Missing or unknown token",
    403: "Not allowed for this token, or over a team quota",
    404: "Not found (or not visible to this token)",
    409: "Conflicts with the job's state",
    412: "Version mismatch",
    413: "Request body too large",
    415: "Body is not JSON",
    422: "Invalid value (on a mutation also: idempotency-key-reused, the key was used for another request)",
    428: "If-Match missing",
    429: "Too many creates; see Retry-After",
    503: "Log unreachable, or still being read after a start; retry with the same Idempotency-Key",
}

_PARSER_400 = "Not HTTP the server can parse (e.g. a request line or header over 8190 bytes)"


def _models(routes: Iterable[Route]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    found: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {(ProblemOut, "serialization"): None}
    for route in routes:
        for model in (route.query, route.body):
            if model is not None:
                found[(model, "validation")] = None
        for model in (route.response, *(m for _s, m, _d in route.others)):
            if model is not None:
                found[(model, "serialization")] = None
    return list(found)


def document(routes: Iterable[Route], *, version: str = "0.1.0") -> dict[str, Any]:
    """The whole OpenAPI document for ``routes``."""
    routes = list(routes)
    refs, schemas = models_json_schema(_models(routes), ref_template=REF)
    components = dict(schemas.get("$defs", {}))
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, refs, components)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Tickwheel gateway",
            "version": version,
            "description": "Jobs, runs and logs of the Tickwheel scheduler. Errors are RFC 9457 problems.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _ref(refs: dict[tuple[type[BaseModel], str], Any], model: type[BaseModel], mode: str) -> dict[str, Any]:
    return dict(refs[(model, mode)])


def _operation(route: Route, refs: dict[Any, Any], components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag],
        "parameters": _path_params(route) + _query_params(route, components) + _header_params(route),
        "responses": _responses(route, refs),
    }
    if route.body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _ref(refs, route.body, "validation")}},
        }
    if route.auth:
        op["security"] = [{"bearer": []}]
    return op


def _path_params(route: Route) -> list[dict[str, Any]]:
    names = _PATH_PARAM.findall(route.path)
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {
                "type": "string",
                "pattern": STATIC_NAME_PATTERN if name == "file" else JOB_ID_PATTERN,
            },
        }
        for name in names
    ]


def _query_params(route: Route, components: dict[str, Any]) -> list[dict[str, Any]]:
    if route.query is None:
        return []
    schema = route.query.model_json_schema(ref_template=REF)
    components.update(schema.get("$defs", {}))
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]


def _header_params(route: Route) -> list[dict[str, Any]]:
    params = []
    for header in route.headers:
        schema: dict[str, Any] = {"type": "string"}
        if header.pattern:
            schema["pattern"] = header.pattern
        params.append(
            {
                "name": header.name,
                "in": "header",
                "required": header.required,
                "description": header.description,
                "schema": schema,
            }
        )
    return params


def _responses(route: Route, refs: dict[Any, Any]) -> dict[str, Any]:
    responses: dict[str, Any] = {
        str(route.ok): _success(route, route.response, refs, _DESCRIPTIONS[route.ok])
    }
    for status, model, description in route.others:
        responses[str(status)] = _success(route, model, refs, description)
    problem = {"schema": _ref(refs, ProblemOut, "serialization")}
    for status in route.problems:
        responses.setdefault(
            str(status),
            {"description": _DESCRIPTIONS.get(status, "Error"), "content": {PROBLEM_JSON: problem}},
        )
    # Below the app, aiohttp's HTTP parser answers a request it cannot read (a request line or
    # a header over 8190 bytes, say) with a text/plain 400 that no middleware sees: any route.
    malformed = responses.setdefault("400", {"description": _PARSER_400, "content": {}})
    malformed["content"]["text/plain"] = {"schema": {"type": "string"}}
    return responses


def _success(
    route: Route, model: type[BaseModel] | None, refs: dict[Any, Any], description: str
) -> dict[str, Any]:
    if model is None:
        content = {
            media: {"schema": {"type": "object"} if media == "application/json" else {"type": "string"}}
            for media in (route.media, *route.more_media)
        }
        return {"description": description, "content": content}
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref(refs, model, "serialization")}},
    }
