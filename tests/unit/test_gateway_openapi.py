"""The OpenAPI contract: every route documented, every documented route served, responses valid."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.test_gateway_fakes import Harness, auth, create, harness, job_body
from tests.unit.test_projection_events import chunk, dead_letter, due, started
from tickwheel.gateway.app import build_app
from tickwheel.gateway.auth import TokenTable
from tickwheel.gateway.openapi import document
from tickwheel.gateway.problems import PROBLEM_JSON
from tickwheel.gateway.routes import ROUTES
from tickwheel.settings import Settings

DOC = document(ROUTES)


# ---------------------------------------------------------------------------
# A small JSON Schema (2020-12) validator for the keywords pydantic emits


class InvalidError(AssertionError):
    pass


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
    "integer": int,
    "number": (int, float),
}


def _is(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[kind])


def resolve(ref: str) -> dict[str, Any]:
    node: Any = DOC
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def validate(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    if "$ref" in schema:
        validate(value, resolve(schema["$ref"]), where)
    kind = schema.get("type")
    if kind is not None and not any(_is(value, k) for k in (kind if isinstance(kind, list) else [kind])):
        raise InvalidError(f"{where}: {value!r} is not {kind}")
    if "const" in schema and value != schema["const"]:
        raise InvalidError(f"{where}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise InvalidError(f"{where}: {value!r} not in {schema['enum']}")
    _combinators(value, schema, where)
    if isinstance(value, dict):
        _object(value, schema, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            validate(item, schema.get("items", {}), f"{where}[{i}]")
    elif isinstance(value, str):
        _string(value, schema, where)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _number(value, schema, where)


def _combinators(value: Any, schema: dict[str, Any], where: str) -> None:
    for sub in schema.get("allOf", []):
        validate(value, sub, where)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            passing = 0
            for sub in schema[key]:
                try:
                    validate(value, sub, where)
                    passing += 1
                except InvalidError:
                    pass
            if passing == 0 or (key == "oneOf" and passing > 1):
                raise InvalidError(f"{where}: {value!r} matches {passing} of {key}")


def _object(value: dict[str, Any], schema: dict[str, Any], where: str) -> None:
    props = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            raise InvalidError(f"{where}: missing {name}")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            validate(item, props[name], f"{where}.{name}")
        elif extra is False:
            raise InvalidError(f"{where}: unexpected {name}")
        elif isinstance(extra, dict):
            validate(item, extra, f"{where}.{name}")


def _string(value: str, schema: dict[str, Any], where: str) -> None:
    if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 10**9):
        raise InvalidError(f"{where}: length of {value!r}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise InvalidError(f"{where}: {value!r} !~ {schema['pattern']}")


def _number(value: float, schema: dict[str, Any], where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise InvalidError(f"{where}: {value} < {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        raise InvalidError(f"{where}: {value} > {schema['maximum']}")


# ---------------------------------------------------------------------------


def _served(app: Any) -> set[tuple[str, str]]:
    return {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.method != "HEAD" and r.resource is not None
    }


def _documented() -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in DOC["paths"].items() for method in ops}


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    """The app's router and /openapi.json list exactly the same (method, path) pairs."""
    app = build_app(Settings(), tokens=TokenTable([]))
    assert _served(app) == _documented()


def test_document_is_openapi_31_and_every_ref_resolves() -> None:
    """The document declares OpenAPI 3.1, names every operation, and all $refs resolve."""
    assert DOC["openapi"] == "3.1.0"
    ids = [op["operationId"] for ops in DOC["paths"].values() for op in ops.values()]
    assert len(ids) == len(set(ids)) == len(ROUTES)

    def refs(node: Any) -> list[str]:
        if isinstance(node, dict):
            found = [node["$ref"]] if "$ref" in node else []
            return found + [r for v in node.values() for r in refs(v)]
        if isinstance(node, list):
            return [r for v in node for r in refs(v)]
        return []

    for ref in refs(DOC):
        assert resolve(ref)


def test_validator_rejects_bodies_that_break_the_schema() -> None:
    """The contract check has teeth: wrong types, missing members and extra enum values fail."""
    problem = {"$ref": "#/components/schemas/ProblemOut"}
    good = {"type": "t", "title": "x", "status": 400, "detail": "", "instance": "/", "request_id": "r"}
    validate(good, problem)
    for bad in ({**good, "status": "400"}, {k: v for k, v in good.items() if k != "title"}):
        with pytest.raises(InvalidError):
            validate(bad, problem)
    with pytest.raises(InvalidError):
        validate({"outcome": "maybe"}, {"$ref": "#/components/schemas/AnswerOut"})


def test_problem_schema_matches_rfc_9457_members() -> None:
    """Problem documents carry the RFC 9457 members plus the field at fault."""
    schema = DOC["components"]["schemas"]["ProblemOut"]
    assert {"type", "title", "status", "detail", "instance"} <= set(schema["required"])
    assert "field" in schema["properties"]


def _operation(method: str, path: str) -> dict[str, Any]:
    for template, ops in DOC["paths"].items():
        pattern = "^" + re.sub(r"{[a-z_]+}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in ops:
            return dict(ops[method.lower()])
    raise AssertionError(f"{method} {path} is not documented")


async def check(h: Harness, method: str, url: str, **kwargs: Any) -> int:
    """Make the request, then validate status, content type and body against the document."""
    response = await h.client.request(method, url, **kwargs)
    op = _operation(method, url.split("?", maxsplit=1)[0])
    documented = op["responses"].get(str(response.status))
    assert documented is not None, f"{method} {url}: status {response.status} not documented"
    media = response.content_type
    content = documented["content"]
    assert media in content, f"{method} {url}: {media} not documented for {response.status}"
    if media in ("application/json", PROBLEM_JSON) and "$ref" in content[media]["schema"]:
        validate(await response.json(), content[media]["schema"])
    return response.status


async def test_responses_validate_against_the_document() -> None:
    """Successful and problem answers of every route have documented statuses and valid bodies."""
    async with harness() as h:
        owner = {**auth("pay-owner"), "Idempotency-Key": "k"}
        created = await create(h, key="doc")
        job_id = created["job_id"]
        h.feeder.feed(due("r-1", job_id), started("r-1", job_id), chunk("r-1", job_id), dead_letter(job_id))
        base = f"/v1/jobs/{job_id}"
        statuses = [
            await check(h, "POST", "/v1/jobs", json=job_body(), headers=owner),
            await check(
                h,
                "POST",
                "/v1/jobs?wait=committed",
                json=job_body(),
                headers={**owner, "Idempotency-Key": "2"},
            ),
            await check(h, "POST", "/v1/jobs", json={"team": 5}, headers=owner),
            await check(
                h, "POST", "/v1/jobs", data=b"{", headers={**owner, "Content-Type": "application/json"}
            ),
            await check(h, "POST", "/v1/jobs", data=b"x", headers={**owner, "Content-Type": "text/plain"}),
            await check(h, "GET", "/v1/jobs?limit=2", headers=owner),
            await check(h, "GET", "/v1/jobs?limit=0", headers=owner),
            await check(h, "GET", base, headers=owner),
            await check(h, "GET", "/v1/jobs/nope", headers=owner),
            await check(h, "PUT", base, json=job_body(), headers={**owner, "If-Match": "1"}),
            await check(h, "PUT", base, json=job_body(), headers=owner),
            await check(h, "POST", f"{base}/pause", headers=owner),
            await check(
                h, "POST", f"{base}/resume?wait=committed", headers={**owner, "Idempotency-Key": "r"}
            ),
            await check(h, "POST", f"{base}/trigger", headers={**owner, "Idempotency-Key": "t"}),
            await check(h, "POST", f"{base}/cancel", headers={**owner, "Idempotency-Key": "c"}),
            await check(h, "GET", f"{base}/preview?count=3", headers=owner),
            await check(h, "GET", f"{base}/runs", headers=owner),
            await check(h, "GET", "/v1/runs/r-1", headers=owner),
            await check(h, "GET", "/v1/runs/r-1/logs", headers=owner),
            await check(h, "GET", f"/v1/commands/{created['command_id']}", headers=owner),
            await check(h, "GET", "/v1/preview?expr=0+3+*+*+*&tz=Asia/Kolkata", headers=owner),
            await check(h, "GET", "/v1/preview?expr=nope", headers=owner),
            await check(h, "GET", "/v1/stats", headers=owner),
            await check(h, "GET", "/v1/dead-letters", headers=owner),
            await check(h, "GET", "/v1/whoami", headers=owner),
            await check(h, "GET", "/v1/whoami"),
            await check(h, "DELETE", base, headers=owner),
            await check(h, "GET", "/healthz"),
            await check(h, "GET", "/readyz"),
            await check(h, "GET", "/metrics"),
            await check(h, "GET", "/openapi.json"),
        ]
        assert {200, 201, 202, 400, 401, 404, 415, 422, 428} <= set(statuses)


async def test_served_document_is_the_generated_one() -> None:
    """/openapi.json serves exactly the document generated from the route table."""
    async with harness() as h:
        assert await (await h.client.get("/openapi.json")).json() == DOC


# ---------------------------------------------------------------------------
# Regressions found by the schemathesis run (test_gateway_schemathesis.py)


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def test_schemas_use_only_keywords_that_bind_as_the_models_do() -> None:
    """No "ge"/"le" (unknown to JSON Schema, so unbounded) and no patternProperties (admits other keys)."""
    assert not {"ge", "le", "gt", "lt", "patternProperties"} & _keys(DOC)
    labels = DOC["components"]["schemas"]["JobCreateIn"]["properties"]["labels"]
    assert labels["propertyNames"]["pattern"]
    assert labels["additionalProperties"]["type"] == "string"
    window = DOC["components"]["schemas"]["JobCreateIn"]["properties"]["catchup_window_ms"]
    assert (window["minimum"], window["maximum"]) == (0, 30 * 86_400_000)


def _parameter(operation_id: str, name: str) -> dict[str, Any]:
    for ops in DOC["paths"].values():
        for op in ops.values():
            if op["operationId"] == operation_id:
                return next(p for p in op["parameters"] if p["name"] == name)
    raise AssertionError(operation_id)


async def test_if_match_pattern_admits_exactly_versions_the_handler_takes() -> None:
    """Every If-Match the document allows is taken as the version; the ones it refuses are 400."""
    pattern = _parameter("update_job", "If-Match")["schema"]["pattern"]
    async with harness() as h:
        cases = (('"1"', True), ("1", True), ('W/"1"', True), ("0", False), ("v1", False))
        for i, (value, documented) in enumerate(cases):
            assert bool(re.search(pattern, value)) is documented
            job_id = (await create(h, key=f"k{i}"))["job_id"]  # each at version 1
            response = await h.client.put(
                f"/v1/jobs/{job_id}", json=job_body(), headers={**auth("pay-owner"), "If-Match": value}
            )
            assert (response.status == 202) is documented, (value, response.status)


async def test_documented_cursor_pattern_matches_the_cursors_handed_out() -> None:
    """next_cursor values match the documented cursor pattern; a non-ASCII cursor is a 400 on cursor."""
    (text, _null) = _parameter("list_jobs", "cursor")["schema"]["anyOf"]
    pattern = text["pattern"]
    async with harness() as h:
        await create(h, key="a")
        await create(h, key="b")
        page = await (await h.client.get("/v1/jobs?limit=1", headers=auth("pay-owner"))).json()
        assert re.search(pattern, page["next_cursor"])
        response = await h.client.get("/v1/jobs?cursor=v1.%C3%98", headers=auth("pay-owner"))
        assert response.status == 400
        assert (await response.json())["field"] == "cursor"


async def test_a_request_line_the_parser_refuses_is_a_documented_text_400() -> None:
    """Over 8190 bytes the HTTP parser answers text/plain 400 before the app; every operation says so."""
    async with harness() as h:
        response = await h.client.get("/v1/jobs?name_prefix=" + "x" * 9_000, headers=auth("pay-owner"))
        assert (response.status, response.content_type) == (400, "text/plain")
    for ops in DOC["paths"].values():
        for op in ops.values():
            assert "text/plain" in op["responses"]["400"]["content"], op["operationId"]


def test_ui_files_are_documented_with_the_media_types_served() -> None:
    """/ui/{file} documents each media type the handler states, and file names as it accepts them."""
    from tickwheel.gateway.handlers import STATIC_FALLBACK, STATIC_MEDIA

    content = DOC["paths"]["/ui/{file}"]["get"]["responses"]["200"]["content"]
    assert set(content) == {*STATIC_MEDIA.values(), STATIC_FALLBACK}
    assert _parameter("ui_file", "file")["schema"]["pattern"]
