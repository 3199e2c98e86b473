"""The Prometheus files in compose/: scrape config, alert rules, and the names they use.

An alert on a metric nobody exports never fires, and a typo in a label matcher selects
nothing, so both are checked against the metrics the code defines: every ``*Metrics``
dataclass under ``tickwheel/`` is built and its collectors read. ``MetricCatalog`` and
``references`` are shared with ``test_dashboard.py``.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from tickwheel.gateway.auth import Role, TokenTable

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
PACKAGE = ROOT / "tickwheel"
SEVERITIES = {"page", "warning"}
# Labels Prometheus adds to every scraped series (job, instance) or keeps for itself.
TARGET_LABELS = frozenset({"job", "instance", "__name__"})
# Series Prometheus itself writes for each target.
BUILTIN_SERIES = {"up": frozenset[str](), "scrape_duration_seconds": frozenset[str]()}
SUFFIXES = {
    "counter": (("_total", ()), ("_created", ())),
    "gauge": (("", ()),),
    "histogram": (("_bucket", ("le",)), ("_count", ()), ("_sum", ()), ("_created", ())),
    "summary": (("", ("quantile",)), ("_count", ()), ("_sum", ()), ("_created", ())),
    "info": (("_info", ()),),
}


# ---------------------------------------------------------------------------
# The metrics the code defines


@dataclass(frozen=True)
class Metric:
    family: str
    kind: str
    labels: frozenset[str]


def _metric_modules() -> Iterator[Any]:
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "prometheus_client" in text and "CollectorRegistry" in text:
            yield importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))


def _collectors() -> Iterator[MetricWrapperBase]:
    """Every collector of every metrics dataclass (``registry`` field plus ``create()``)."""
    for module in _metric_modules():
        for obj in vars(module).values():
            if not (isinstance(obj, type) and obj.__module__ == module.__name__):
                continue
            if not dataclasses.is_dataclass(obj) or "registry" not in obj.__dataclass_fields__:
                continue
            factory: Any = obj  # the metrics dataclasses share a create() classmethod
            made = factory.create()
            for field in dataclasses.fields(made):
                value = getattr(made, field.name)
                if isinstance(value, MetricWrapperBase):
                    yield value


@cache
def catalog() -> dict[str, Metric]:
    """Sample name (``tickwheel_run_due_total``, ``..._bucket``) -> the metric it belongs to."""
    names: dict[str, Metric] = {}
    for collector in _collectors():
        # Label names have no public accessor; _labelnames is stable across client versions.
        labels = frozenset(collector._labelnames)
        for family in collector.describe():
            for suffix, extra in SUFFIXES[family.type]:
                names[family.name + suffix] = Metric(family.name, family.type, labels | frozenset(extra))
    for name, labels in BUILTIN_SERIES.items():
        names[name] = Metric(name, "builtin", labels)
    return names


def literal_metric_names() -> set[str]:
    """Names given as string literals to Counter/Gauge/Histogram/Summary anywhere in the code."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("Counter", "Gauge", "Histogram", "Summary")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return found


# ---------------------------------------------------------------------------
# A small PromQL scanner: which series and labels an expression names


_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<matchers>\{(?:[^{}"']|"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')*\})
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{?\w+\}?)
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y)(?![A-Za-z0-9_]))+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<space>\s+)
  | (?P<other>.)
    """,
    re.VERBOSE,
)
_MATCHER = re.compile(r"""([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)\s*(?:"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')""")
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", *_GROUPING}


@dataclass(frozen=True)
class Reference:
    """What one expression names: series with their matcher labels, and grouping labels."""

    series: tuple[tuple[str, frozenset[str]], ...]
    grouping: frozenset[str]

    @property
    def names(self) -> set[str]:
        return {name for name, _ in self.series}


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "", m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup != "space"]


def _grouped_labels(tokens: list[tuple[str, str]], start: int) -> tuple[set[str], int]:
    """Label names of ``by (a, b)`` starting at the ``(`` at ``start``; and the index after it."""
    labels: set[str] = set()
    i = start + 1
    while i < len(tokens) and tokens[i][1] != ")":
        if tokens[i][0] == "ident":
            labels.add(tokens[i][1])
        i += 1
    return labels, i + 1


def references(expr: str) -> Reference:
    """The series and labels ``expr`` names (functions, keywords and variables left out)."""
    tokens = _tokens(expr)
    series: list[tuple[str, frozenset[str]]] = []
    grouping: set[str] = set()
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if kind == "ident" and text in _GROUPING and following[1] == "(":
            labels, i = _grouped_labels(tokens, i + 1)
            grouping |= labels
            continue
        # A function call, or an aggregation with its grouping first: `sum by (le) (...)`.
        called = following[1] == "(" or following[1] in ("by", "without")
        if kind == "ident" and text not in _KEYWORDS and not called:
            matchers = (
                frozenset(_MATCHER.findall(following[1])) if following[0] == "matchers" else frozenset()
            )
            series.append((text, matchers))
        elif kind == "matchers" and (i == 0 or tokens[i - 1][0] != "ident"):
            raise AssertionError(f"a selector without a metric name in {expr!r}")
        i += 1
    return Reference(tuple(series), frozenset(grouping))


def unknown_names(expr: str) -> list[str]:
    """Problems with the names ``expr`` uses: unknown series, labels they do not have."""
    known = catalog()
    ref = references(expr)
    problems = [f"unknown series {name!r}" for name in sorted(ref.names - known.keys())]
    labels_in_use: set[str] = set(TARGET_LABELS)
    for name, matchers in ref.series:
        if name not in known:
            continue
        labels_in_use |= known[name].labels
        problems += [
            f"{name} has no label {label!r}"
            for label in sorted(matchers - known[name].labels - TARGET_LABELS)
        ]
    problems += [f"grouping by unknown label {label!r}" for label in sorted(ref.grouping - labels_in_use)]
    return problems


# ---------------------------------------------------------------------------
# Files


def load_yaml(name: str) -> Any:
    return yaml.safe_load((COMPOSE / name).read_text(encoding="utf-8"))


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in load_yaml("alerts.yml")["groups"] for rule in group["rules"]]


def rule_id(rule: dict[str, Any]) -> str:
    return str(rule.get("alert", "?"))


_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_RUNBOOK = re.compile(r"^docs/operations\.md#[a-z0-9]+(?:-[a-z0-9]+)*$")
_ALERT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")


def test_scanner_separates_series_from_functions_labels_and_variables() -> None:
    """references() keeps metric names and their matchers, and drops functions, keywords, vars."""
    ref = references(
        'sum by (pool, le) (rate(x_bucket{pool=~"$pool", a="}"}[$__rate_interval]))'
        " / on (instance) group_left (job) (y > bool 0.5e3) or vector(0) unless z offset 5m"
    )
    assert ref.series == (("x_bucket", frozenset({"pool", "a"})), ("y", frozenset()), ("z", frozenset()))
    assert ref.grouping == {"pool", "le", "instance", "job"}


def test_unknown_names_reports_series_and_labels_the_code_does_not_define() -> None:
    """A misspelt series, a label a metric lacks and a grouping label nobody has are all named."""
    assert unknown_names("rate(tickwheel_run_due_total[5m])") == []
    assert unknown_names("tickwheel_run_due") == ["unknown series 'tickwheel_run_due'"]
    assert unknown_names('tickwheel_due_backlog{pool="x"}') == ["tickwheel_due_backlog has no label 'pool'"]
    assert unknown_names("sum by (route) (tickwheel_wheel_size)") == ["grouping by unknown label 'route'"]


def test_catalog_finds_every_metric_named_in_the_code() -> None:
    """Every literal metric name in tickwheel/ is found by building the metrics dataclasses."""
    families = {metric.family for metric in catalog().values()}
    assert literal_metric_names() - families == set()
    assert {"tickwheel_worker_runs_failed", "tickwheel_scheduling_lag_seconds"} <= families


def test_alert_file_parses_into_named_unique_rules() -> None:
    """alerts.yml is YAML with groups of rules; alert names are unique CamelCase words."""
    rules = alert_rules()
    names = [rule_id(rule) for rule in rules]
    assert len(rules) >= 8
    assert len(set(names)) == len(names)
    assert all(_ALERT_NAME.fullmatch(name) for name in names), names


@pytest.mark.parametrize("rule", alert_rules(), ids=rule_id)
def test_every_rule_has_expr_for_severity_summary_and_runbook(rule: dict[str, Any]) -> None:
    """Each rule: an expression, a `for`, a known severity, a summary and a one-line runbook link."""
    assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
    assert isinstance(rule["expr"], str)
    assert rule["expr"].strip()
    assert _DURATION.fullmatch(str(rule["for"]))
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert "\n" not in annotations["summary"]
    assert _RUNBOOK.fullmatch(annotations["runbook"]), annotations["runbook"]


@pytest.mark.parametrize("rule", alert_rules(), ids=rule_id)
def test_every_rule_uses_only_metrics_and_labels_the_code_exports(rule: dict[str, Any]) -> None:
    """The series an alert selects, their label matchers and its grouping labels all exist."""
    assert unknown_names(rule["expr"]) == []


def test_alerts_cover_what_on_call_must_hear_about() -> None:
    """Lag, backlog, stuck partitions, DLQ, retries, projection lag, fencing and leases each alert."""
    used = {name for rule in alert_rules() for name in references(rule["expr"]).names}
    for family in (
        "tickwheel_scheduling_lag_seconds",
        "tickwheel_due_backlog",
        "tickwheel_assigned_partitions",
        "tickwheel_transaction_seconds",
        "tickwheel_dead_letters",
        "tickwheel_worker_runs_failed",
        "tickwheel_projection_lag_records",
        "tickwheel_fenced_producers",
        "tickwheel_worker_lease_self_stops",
    ):
        assert any(catalog().get(name, Metric("", "", frozenset())).family == family for name in used), family


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = load_yaml("docker-compose.yml")
    return loaded


def test_stuck_partition_threshold_is_the_compose_partition_count() -> None:
    """StuckPartition compares the assigned partitions with TICKWHEEL_PARTITIONS of the cluster."""
    partitions = int(compose()["services"]["processor"]["environment"]["TICKWHEEL_PARTITIONS"])
    (rule,) = [r for r in alert_rules() if r["alert"] == "StuckPartition"]
    assert re.search(rf"<\s*{partitions}\s*$", rule["expr"].strip()), rule["expr"]
    assert f"of {partitions} partitions" in rule["annotations"]["summary"]


def _metrics_port(service: dict[str, Any]) -> int:
    command = [str(part) for part in service["command"]]
    if "--metrics-port" in command:
        return int(command[command.index("--metrics-port") + 1])
    return int(service["ports"][0].split(":")[-1])  # the gateway serves /metrics on its HTTP port


def _scrape_ports(job: dict[str, Any]) -> tuple[set[str], set[int]]:
    hosts: set[str] = set()
    ports: set[int] = set()
    for sd in job.get("dns_sd_configs", []):
        hosts |= set(sd["names"])
        ports.add(int(sd["port"]))
    for static in job.get("static_configs", []):
        for target in static["targets"]:
            host, port = target.rsplit(":", 1)
            hosts.add(host)
            ports.add(int(port))
    return hosts, ports


def test_prometheus_scrapes_each_service_on_its_compose_metrics_port() -> None:
    """processor 9400, worker 9401, projections 9402 and gateway 8080/metrics, as compose runs them."""
    config = load_yaml("prometheus.yml")
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    services = compose()["services"]
    expected = {"processor": 9400, "worker": 9401, "projections": 9402, "gateway": 8080}
    assert set(jobs) == set(expected)
    for name, port in expected.items():
        assert _metrics_port(services[name]) == port
        assert _scrape_ports(jobs[name]) == ({name}, {port})
    assert jobs["gateway"].get("metrics_path", "/metrics") == "/metrics"


def test_prometheus_loads_the_rules_where_compose_mounts_them() -> None:
    """rule_files names the path docker-compose.yml mounts alerts.yml at."""
    mounts = compose()["services"]["prometheus"]["volumes"]
    target = next(m.split(":")[1] for m in mounts if m.split(":")[0] == "./alerts.yml")
    assert load_yaml("prometheus.yml")["rule_files"] == [target]


def test_rule_job_selectors_name_scrape_jobs() -> None:
    """Every job="..." or job=~"a|b" matcher in a rule names jobs prometheus.yml defines."""
    jobs = {job["job_name"] for job in load_yaml("prometheus.yml")["scrape_configs"]}
    for rule in alert_rules():
        for value in re.findall(r'job=~?"([^"]*)"', rule["expr"]):
            assert set(value.split("|")) <= jobs, rule_id(rule)


def doc_anchors(text: str) -> set[str]:
    """Anchors of a Markdown page: GitHub's heading slugs and explicit ``<a id="...">``."""
    slugs = {
        re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in text.splitlines()
        if line.startswith("#")
    }
    return slugs | set(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))


def test_runbook_anchors_exist_in_the_operations_doc() -> None:
    """Each runbook link lands on a heading of docs/operations.md (once that doc is written)."""
    doc = ROOT / "docs" / "operations.md"
    if not doc.exists():
        pytest.skip("docs/operations.md is not written yet")
    anchors = {rule["annotations"]["runbook"].split("#", 1)[1] for rule in alert_rules()}
    assert anchors - doc_anchors(doc.read_text(encoding="utf-8")) == set()


def test_example_token_file_loads_in_the_gateway_format() -> None:
    """compose/tokens.example.json, mounted as the gateway's tokens file, loads with every role."""
    path = COMPOSE / "tokens.example.json"
    table = TokenTable.load(file=path, env_json=None, admin_token=None)
    entries = TokenTable.parse(path.read_text(encoding="utf-8"), str(path))
    assert len(table) == len(entries)
    assert {entry.role for entry in entries} == set(Role)
    assert all("CHANGE-ME" in entry.token for entry in entries)
