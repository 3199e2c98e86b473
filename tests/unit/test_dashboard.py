"""compose/grafana-dashboard.json: it parses, is laid out, and queries only real metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.test_alert_rules import COMPOSE, alert_rules, catalog, references, unknown_names

GRID_WIDTH = 24
# Grafana's own variables may appear in queries; the dashboard's are declared in templating.
GRAFANA_VARIABLES = {"__rate_interval", "__interval", "__range"}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((COMPOSE / "grafana-dashboard.json").read_text(encoding="utf-8"))
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    board = dashboard()
    found = [
        (f"{panel['title']} {target['refId']}", target["expr"])
        for panel in panels(board)
        for target in panel.get("targets", [])
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            values = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert values, variable["definition"]
            found.append((f"variable {variable['name']}", f"{values[1]}{{{values[2]}!=''}}"))
    return found


def test_dashboard_parses_with_a_stable_uid_and_a_prometheus_datasource_variable() -> None:
    """The JSON loads; it has a uid, a title, and a datasource variable every panel uses."""
    board = dashboard()
    assert board["uid"] == "tickwheel"
    assert board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(board):
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_panels_have_unique_ids_titles_and_fit_the_grid() -> None:
    """Ids are unique, every panel is titled and described, and no panel overlaps another."""
    board = dashboard()
    every = list(panels(board))
    assert len({p["id"] for p in every}) == len(every)
    taken: set[tuple[int, int]] = set()
    for panel in every:
        assert panel["title"].strip()
        if panel["type"] != "row":
            assert panel["description"].strip(), panel["title"]
            assert panel["targets"], panel["title"]
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= GRID_WIDTH, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_targets_have_unique_ref_ids_within_a_panel() -> None:
    """Grafana keys a panel's queries by refId: they must differ."""
    for panel in panels(dashboard()):
        ref_ids = [target["refId"] for target in panel.get("targets", [])]
        assert len(set(ref_ids)) == len(ref_ids), panel["title"]


@pytest.mark.parametrize(("where", "expr"), queries(), ids=[where for where, _ in queries()])
def test_every_query_uses_only_metrics_and_labels_the_code_exports(where: str, expr: str) -> None:
    """Each panel query names series, matchers and grouping labels the code really exports."""
    assert unknown_names(expr) == []


def test_queries_use_only_declared_variables() -> None:
    """$name in a query is a templating variable of this dashboard or one of Grafana's own."""
    declared = {v["name"] for v in dashboard()["templating"]["list"]} | GRAFANA_VARIABLES
    for where, expr in queries():
        used = set(re.findall(r"\$\{?(\w+)\}?", expr))
        assert used <= declared, where


def test_every_alerted_metric_has_a_panel() -> None:
    """Whatever an alert fires on can be looked at on the dashboard."""
    known = catalog()
    shown = {known[name].family for _, expr in queries() for name in references(expr).names if name in known}
    alerted = {
        known[name].family
        for rule in alert_rules()
        for name in references(rule["expr"]).names
        if name in known
    }
    assert alerted - shown == set()
