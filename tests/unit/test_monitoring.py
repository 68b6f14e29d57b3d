"""deploy/monitoring: the Prometheus alert rules and the Grafana dashboard name only metrics and
labels the worker really exposes, and the rules behave as their unit tests say.

* The metric names come from the worker's own registry: ``create_app`` builds the service as
  ``mmr worker`` does (nothing connects), and every collector registered on its ``Metrics``
  registry (stream/service/metrics.py, plus what app.py and halts.py add to it) gives its sample
  names by type (a labelled metric with no child yet still counts). Prometheus's own series per
  target (``up``) are the only others allowed.
* Expressions are parsed as PromQL (``promql-parser``): every selector, matcher and grouping label
  is checked, and a broken expression must be refused.
* ``promtool check rules``, ``promtool test rules`` (alerts_test.yml beside the rules) and
  ``promtool check config`` run where promtool is installed (Debian's ``prometheus`` package;
  ``make test`` installs it where it can) and are skipped with a message elsewhere.
* The compose profile ``monitoring`` mounts what the configuration files name.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from repo_paths import ROOT

MONITORING = ROOT / "deploy" / "monitoring"
RULES = MONITORING / "alerts.yml"
RULE_TESTS = MONITORING / "alerts_test.yml"
PROM_CONFIG = MONITORING / "prometheus.yml"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "mmr-stream.json"
DATASOURCES = MONITORING / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = MONITORING / "grafana" / "provisioning" / "dashboards" / "mmr-stream.yml"
JOB = "mmr-worker"

#: series Prometheus writes itself for every scrape target (not the worker's)
PROMETHEUS_SERIES = frozenset({"up"})
#: labels every scraped series has (target labels), and the ones of the sample types
TARGET_LABELS = frozenset({"job", "instance", "__name__", "le"})
#: sample names of a metric family, by its type (prometheus_client's exposition)
SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("", "_count", "_sum", "_created"), "info": ("_info",), "stateset": ("",), "unknown": ("",)}
#: Grafana's variables in range positions, as Prometheus would see them after substitution
GRAFANA_RANGES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
PROMTOOL_MISSING = ("promtool not installed (Debian: apt-get install prometheus; `make test` installs it "
                    "where apt-get works)")


@functools.cache
def worker_metrics() -> tuple[frozenset[str], frozenset[str]]:
    """(sample names, label names) of the registry a worker serves on ``/metrics``."""
    from stream.service.app import create_app
    from stream.service.config import Settings

    svc = create_app(Settings(redis_url="redis://127.0.0.1:1/0", redis_cluster=False, http_host="127.0.0.1",
                              http_port=0))
    try:
        registry = svc.metrics.registry
        names: set[str] = set()
        labels: set[str] = set()
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
            names.update(s.name for s in family.samples)
            labels.update(k for s in family.samples for k in s.labels)
        # a labelled metric with no child yet has no samples: its declared label names
        # (prometheus_client keeps them on the collector; checked to be found below)
        for collector in set(registry._collector_to_names):  # type: ignore[attr-defined]
            labels.update(getattr(collector, "_labelnames", ()))
        return frozenset(names), frozenset(labels)
    finally:
        if svc.http_socket is not None:
            svc.http_socket.close()
        svc.executor.shutdown(wait=False)


def test_the_registry_listing_sees_labelled_metrics_without_children() -> None:
    names, labels = worker_metrics()
    assert {"mmr_dead_letters_total", "mmr_consumer_lag", "mmr_batch_seconds_bucket", "mmr_step_seconds_bucket",
            "mmr_store_unavailable", "mmr_redis_restarts_total", "mmr_partitions_halted"} <= names
    assert {"reason", "topic", "partition", "stage", "phase", "type", "kind", "action"} <= labels
    assert "mmr_dead_letters" not in names  # a counter's samples end in _total


# --- PromQL --------------------------------------------------------------------------------

def _grafana_to_promql(expr: str) -> str:
    for var, value in GRAFANA_RANGES.items():
        expr = expr.replace(f"[{var}]", f"[{value}]")
    assert "[$" not in expr, f"a Grafana variable in a range: {expr}"
    return expr


def selectors(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression refers to: selectors, matchers, by/without,
    on/ignoring and group_left/right labels. A selector without a metric name is refused."""
    tree = promql_parser.parse(expr)  # ValueError on bad PromQL
    names: set[str] = set()
    labels: set[str] = set()

    def visit(node: Any) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr!r}"
            names.add(node.name)
            labels.update(m.name for m in node.matchers.matchers)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            labels.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            if node.modifier.matching is not None:
                labels.update(node.modifier.matching.labels)
            labels.update(node.modifier.group_labels or ())
        return True

    promql_parser.walk(tree, visit)
    return names, labels


def unknown_in(expr: str) -> list[str]:
    """What ``expr`` names that the worker does not expose (empty: fine)."""
    worker_names, worker_labels = worker_metrics()
    names, labels = selectors(expr)
    return ([f"metric {n}" for n in sorted(names - worker_names - PROMETHEUS_SERIES)]
            + [f"label {lab}" for lab in sorted(labels - worker_labels - TARGET_LABELS)])


def test_the_check_refuses_unknown_metrics_labels_and_bad_promql() -> None:
    assert unknown_in('sum by (topic) (rate(mmr_dead_letters_total{reason="field", job="x"}[5m]))') == []
    assert unknown_in("rate(mmr_dead_letters[5m])") == ["metric mmr_dead_letters"]
    assert unknown_in("sum by (reasn) (mmr_consumer_lag)") == ["label reasn"]
    assert unknown_in("a_total / on(partiton) group_left(topic) up") == ["metric a_total", "label partiton"]
    assert unknown_in('histogram_quantile(0.99, sum by (le) (rate(mmr_batch_second_bucket[5m])))') == [
        "metric mmr_batch_second_bucket"]
    with pytest.raises(ValueError):
        selectors("rate(mmr_consumer_lag[5m]")
    with pytest.raises(AssertionError):
        selectors('{__name__=~"mmr_.*"}')


@functools.cache
def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for group in doc["groups"] for r in group["rules"]]


def _alert_ids() -> list[str]:
    return [r["alert"] for r in rules()]


@pytest.mark.parametrize("alert", _alert_ids())
def test_every_rule_names_only_what_the_worker_exposes(alert: str) -> None:
    rule = next(r for r in rules() if r["alert"] == alert)
    assert unknown_in(rule["expr"]) == [], rule["expr"]
    assert rule["labels"]["severity"] in ("critical", "warning")
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    if "up" in selectors(rule["expr"])[0]:
        assert f'job="{JOB}"' in rule["expr"], "up of the worker's scrape job only"


def test_the_rules_cover_what_an_operator_is_paged_for() -> None:
    used = {alert: selectors(r["expr"])[0] for r in rules() for alert in [r["alert"]]}
    needed = {"worker down": {"up"}, "lag": {"mmr_consumer_lag"}, "dead letters": {"mmr_dead_letters_total"},
              "redis": {"mmr_store_unavailable"}, "kafka": {"mmr_publish_waiting"},
              "batch latency": {"mmr_batch_seconds_bucket"}}
    for what, metrics in needed.items():
        assert any(metrics <= names for names in used.values()), f"no alert on {what}"
    assert any("histogram_quantile(0.99" in r["expr"] for r in rules()), "a p99 alert"


def test_every_alert_fires_in_a_unit_test_and_stays_quiet_in_another() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert set(_alert_ids()) <= fired, set(_alert_ids()) - fired
    assert set(_alert_ids()) <= quiet, set(_alert_ids()) - quiet


# --- promtool ------------------------------------------------------------------------------

def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip(PROMTOOL_MISSING)
    return subprocess.run([binary, *args], cwd=MONITORING, capture_output=True, text=True, timeout=120)


def test_promtool_check_rules() -> None:
    done = _promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_promtool_test_rules() -> None:
    done = _promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The unit tests can fail: one expected annotation changed makes promtool refuse them."""
    shutil.copy(RULES, tmp_path / RULES.name)
    text = RULE_TESTS.read_text()
    assert "(7700 messages behind)" in text
    (tmp_path / RULE_TESTS.name).write_text(text.replace("(7700 messages behind)", "(7600 messages behind)"))
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip(PROMTOOL_MISSING)
    done = subprocess.run([binary, "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "MmrConsumerLagGrowing" in done.stdout + done.stderr


def test_promtool_check_config() -> None:
    done = _promtool("check", "config", PROM_CONFIG.name)
    assert done.returncode == 0, done.stdout + done.stderr


# --- Prometheus configuration and the compose profile ---------------------------------------

@functools.cache
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def _mounts(service: str) -> dict[str, Path]:
    """container path -> host path of the service's bind mounts (relative to the compose file)."""
    out = {}
    for v in compose()["services"][service].get("volumes", []):
        src, dst = v.split(":")[:2]
        if src.startswith("."):
            out[dst] = (ROOT / src).resolve()
    return out


def test_prometheus_scrapes_the_worker_as_the_job_the_rules_name() -> None:
    config = yaml.safe_load(PROM_CONFIG.read_text())
    (job,) = config["scrape_configs"]
    assert job["job_name"] == JOB
    worker_port = compose()["services"]["worker"]["environment"]["MMR_HTTP_PORT"]
    assert job["static_configs"][0]["targets"] == [f"worker:{worker_port}"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert all(f'job="{JOB}"' in r["expr"] for r in rules() if "up{" in r["expr"])


def test_the_monitoring_profile_mounts_what_the_configuration_names() -> None:
    services = compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"], name
    assert all("profiles" not in svc for name, svc in services.items() if name not in ("prometheus", "grafana")), \
        "`docker compose up` without a profile still starts the whole service"
    prom = _mounts("prometheus")
    config_path = next(a.split("=", 1)[1] for a in services["prometheus"]["command"] if a.startswith("--config.file="))
    assert prom[config_path] == PROM_CONFIG
    for rule_file in yaml.safe_load(PROM_CONFIG.read_text())["rule_files"]:
        assert prom[str(Path(config_path).parent / rule_file)] == (MONITORING / rule_file).resolve()
    graf = _mounts("grafana")
    assert graf["/etc/grafana/provisioning"] == (MONITORING / "grafana" / "provisioning").resolve()
    provider = yaml.safe_load(PROVIDERS.read_text())["providers"][0]
    assert graf[provider["options"]["path"]] == DASHBOARD.parent
    home = services["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    (source,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090" and "127.0.0.1:9090:9090" in services["prometheus"]["ports"]


# --- the dashboard ---------------------------------------------------------------------------

@functools.cache
def dashboard() -> dict[str, Any]:
    doc = json.loads(DASHBOARD.read_text())
    assert isinstance(doc, dict)
    return doc


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and query variable."""
    out = [(f"panel {p['title']!r} {t['refId']}", _grafana_to_promql(t["expr"]))
           for p in _panels(dashboard()["panels"]) for t in p.get("targets", [])]
    for var in dashboard()["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
            assert m, f"variable {var['name']}: {query}"
            out.append((f"variable {var['name']}", m.group(1)))
            out.append((f"variable {var['name']} label", f"sum by ({m.group(2)}) ({m.group(1)})"))
    return out


def test_every_dashboard_query_names_only_what_the_worker_exposes() -> None:
    queries = _queries()
    assert len(queries) >= 20
    bad = {where: unknown_in(expr) for where, expr in queries if unknown_in(expr)}
    assert bad == {}, bad


def test_the_dashboard_is_a_provisionable_grafana_dashboard() -> None:
    d = dashboard()
    assert d["uid"] and d["title"] and isinstance(d["schemaVersion"], int)
    assert "id" not in d or d["id"] is None, "no database id: provisioning assigns it"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in _panels(d["panels"])]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for p in _panels(d["panels"]):
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["refId"], p["title"]
    covered = set().union(*(selectors(expr)[0] for _, expr in _queries()))
    for r in rules():  # every alert's metrics can be looked at on the dashboard
        assert selectors(r["expr"])[0] <= covered, r["alert"]
