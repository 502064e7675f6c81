"""The alert rules (prometheus/vllm-ops.rules.yml) name only metrics the watch really writes: a rule over a
name nobody exports matches nothing and never fires, silently (one of vLLM's own shipped rules names a
counter without its _total suffix). promtool checks and tests the rules themselves (make lint)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from watch_installed import watch as w

REPO = Path(__file__).resolve().parents[3]

RULES = REPO / "prometheus" / "vllm-ops.rules.yml"
METRIC = re.compile(r"\bvllm[_:][A-Za-z0-9_:]*")


def test_every_metric_a_rule_uses_is_one_the_watch_exports_or_a_rule_records():
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    recorded = {rule["record"] for rule in rules if "record" in rule}
    used = {name for rule in rules for name in METRIC.findall(rule["expr"])}
    assert used and used <= set(w.EXPORTED) | recorded, used - set(w.EXPORTED) - recorded
    assert all(name.startswith("vllm_ops:") for name in recorded)  # level:metric:operations, as Prometheus names them
    assert {rule["alert"] for rule in rules if "alert" in rule} == {
        "VllmSlowdown", "VllmEngineStalled", "VllmWatchGaveUp", "VllmPcieLinkDegraded", "VllmWatchSilent"}


def test_the_watch_declares_counters_by_their_wire_names():
    for name, (kind, _) in w.EXPORTED.items():
        assert name.startswith("vllm_ops_watch_")
        assert name.endswith("_total") == (kind == "counter"), name


DASHBOARD = REPO / "prometheus" / "vllm-ops-dashboard.json"


def test_the_dashboard_is_importable_and_names_only_exported_metrics():
    """Grafana is not in Debian: the dashboard ships as JSON, its structure checked here. An import asks
    for the Prometheus data source (__inputs); each panel has a place and queries; each query names only
    metrics the watch writes."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"] and dashboard["uid"]
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    panel_exprs = [t["expr"] for p in panels for t in p["targets"]]
    other_exprs = [a["expr"] for a in dashboard["annotations"]["list"]]
    other_exprs += [v["query"] for v in dashboard["templating"]["list"]]
    for panel in panels:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        assert panel["targets"] and all(t["datasource"]["uid"] == "${DS_PROMETHEUS}" for t in panel["targets"])
    on_panels = {name for expr in panel_exprs for name in METRIC.findall(expr)}
    used = on_panels | {name for expr in other_exprs for name in METRIC.findall(expr)}
    assert used <= set(w.EXPORTED), used - set(w.EXPORTED)
    # every figure has a panel but the two times that mark the graphs (annotations): the last incident's, and
    # since when a slowdown holds
    assert on_panels == set(w.EXPORTED) - {"vllm_ops_watch_last_incident_timestamp_seconds",
                                           "vllm_ops_watch_slowdown_since_timestamp_seconds"}
