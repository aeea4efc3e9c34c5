"""The monitoring kit (docs/contract.md §22.3, docker/monitoring/): alert rules unit-tested with
Debian's ``promtool``, the Prometheus config checked by it, and the Grafana dashboard and the rules
reading only metrics that ``/metrics`` exposes (the REST registry rendered on a real Redis).

``promtool`` comes with Debian's ``prometheus`` package, which `make test` installs (the
``monitoring-tools`` target); without it these tests fail, naming the package.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import redis
import yaml

from crawlhive.rest.cluster import ClusterView
from crawlhive.rest.metrics import RestMetrics
from crawlhive.utils.backends.redis_clients import keys_from_settings
from crawlhive.utils.config.settings import Settings
from crawlhive.utils.state.response_metrics import ResponseMetrics
from crawlhive.utils.state.stats import Stats, crawler_counter_name, failed_counter_name, items_counter_name

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docker" / "monitoring"
DASHBOARD = MONITORING / "grafana" / "dashboards" / "crawlhive.json"
#: Metrics the rules and dashboard read that other parts of §20/§21 add (sinks, proxies): checked
#: by name here until those land in /metrics.
ELSEWHERE = {"crawlhive_sink_lag", "crawlhive_proxy_requests_total"}


def promtool(*args: str, cwd: Path = MONITORING) -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (`make test` does: monitoring-tools)")
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    assert "SUCCESS: 9 rules found" in promtool("check", "rules", "alerts.yml")
    # as docs/operations.md prints it, from the repository's root
    assert "SUCCESS" in promtool("test", "rules", "docker/monitoring/alerts.test.yml", cwd=ROOT)


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((MONITORING / "alerts.test.yml").read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test["alert_rule_test"] if case["exp_alerts"]}
    assert alerts == fired, f"alerts without a firing test: {alerts - fired}"


def test_the_prometheus_config_is_valid_and_loads_the_rules(tmp_path: Path) -> None:
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == ["rest:5343"]
    shutil.copy(MONITORING / "alerts.yml", tmp_path / "alerts.yml")
    config["rule_files"] = ["alerts.yml"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    assert "SUCCESS" in promtool("check", "config", "prometheus.yml", cwd=tmp_path)


def test_the_monitoring_profile_mounts_the_kit() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    services = compose["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
        assert all(port.startswith("127.0.0.1:") for port in services[name]["ports"]), "loopback only"
        for volume in services[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / "docker" / source).exists(), volume
    mounts = {v.split(":")[1] for v in services["prometheus"]["volumes"]}
    assert {"/etc/prometheus/prometheus.yml", "/etc/prometheus/alerts.yml"} <= mounts
    datasource = yaml.safe_load((MONITORING / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    dashboard = json.loads(DASHBOARD.read_text())
    assert all(panel["datasource"]["uid"] == uid for panel in dashboard["panels"])


def exposed_metric_names(client: redis.Redis, settings: Settings) -> set[str]:
    """Family and sample names of the REST registry's exposition with every kind of stat present."""
    keys = keys_from_settings(settings)
    Stats(client, keys, settings.getlist("STATS_TIMES")).incr_many(
        [
            ("crawler", crawler_counter_name("link", 200), 1),
            ("crawler", items_counter_name("link"), 1),
            ("crawler", failed_counter_name("link"), 1),
        ]
    )
    buffer = ResponseMetrics("link", keys, 50)
    buffer.observe("example.com", 0.2, 200)
    buffer.flush(client)
    metrics = RestMetrics(ClusterView(client, settings, {}), lambda: 0, lambda: 0, cleaner_lag=lambda: 0)
    text = metrics.render().decode()
    return set(re.findall(r"^# TYPE (\w+)", text, re.M)) | set(re.findall(r"^(\w+)[{ ]", text, re.M))


def test_the_dashboard_and_the_rules_read_only_exposed_metrics(
    redis_client: redis.Redis, redis_settings: Settings
) -> None:
    exposed = exposed_metric_names(redis_client, redis_settings) | ELSEWHERE
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    rules = yaml.safe_load((MONITORING / "alerts.yml").read_text())
    exprs += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\bcrawlhive_\w+", expr)}
    assert used <= exposed, f"not on /metrics: {sorted(used - exposed)}"
    for name in ("crawlhive_response_seconds_bucket", "crawlhive_domain_responses_total"):
        assert name in used and name in exposed


def test_the_dashboard_shows_the_figures_the_operators_watch() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    titles = {panel["title"].lower() for panel in dashboard["panels"]}
    exprs = " ".join(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])
    for words in (
        "pages per second",
        "last hour",
        "success rate per domain",
        "percentiles",
        "queue depth",
        "dead letters",
        "cleaner and sink lag",
        "data quality",
    ):
        assert any(words in title for title in titles), words
    assert "histogram_quantile(0.99" in exprs and "increase(crawlhive_pages_crawled_total[1h])" in exprs
