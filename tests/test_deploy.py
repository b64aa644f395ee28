"""The Kubernetes manifests in deploy/: schema-valid, consistent with each other and the gateway.

Deployment, Service and ConfigMap are checked against Kubernetes' own JSON schemas, carried
offline by the kubernetes-validate package, in strict mode (an unknown key fails); the
ServiceMonitor against a small schema of its own (tests/data). No cluster, no network.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from steadystream.gateway.config import config_from_mapping

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "deploy" / "kubernetes" / "gateway.yaml"
SERVICE_MONITOR_SCHEMA = Path(__file__).parent / "data" / "servicemonitor-monitoring-v1.json"
KUBERNETES_VERSION = "1.30"  # the oldest release the manifests are meant for (preStop sleep)


def documents() -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d is not None]
    by_kind = {d["kind"]: d for d in docs}
    assert len(by_kind) == len(docs), "one resource of each kind"
    return by_kind


def validate(doc: dict[str, Any]) -> None:
    if doc["kind"] == "ServiceMonitor":
        schema = json.loads(SERVICE_MONITOR_SCHEMA.read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_every_resource_is_schema_valid() -> None:
    docs = documents()
    assert set(docs) == {"ConfigMap", "Deployment", "Service", "ServiceMonitor"}
    for doc in docs.values():
        validate(doc)


@pytest.mark.parametrize(
    ("kind", "path", "typo"),
    [
        ("Deployment", ("spec", "template", "spec", "containers", 0), "readinesProbe"),
        ("Service", ("spec",), "selecter"),
        ("ServiceMonitor", ("spec", "endpoints", 0), "intervall"),
    ],
)
def test_the_validators_refuse_a_typo(kind: str, path: tuple[Any, ...], typo: str) -> None:
    doc = copy.deepcopy(documents()[kind])
    node = doc
    for key in path:
        node = node[key]
    node[typo] = {}
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(doc)


def test_service_and_monitor_reach_the_pods_port() -> None:
    docs = documents()
    deployment, service, monitor = docs["Deployment"], docs["Service"], docs["ServiceMonitor"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert service["spec"]["selector"].items() <= pod_labels.items()
    service_labels = service["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    pod_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service_ports = {p["name"]: p["targetPort"] for p in service["spec"]["ports"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert service_ports[endpoint["port"]] in pod_ports
    assert endpoint["path"] == "/metrics"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_the_configmap_is_a_valid_gateway_config_on_the_pods_port() -> None:
    docs = documents()
    config = config_from_mapping(
        yaml.safe_load(docs["ConfigMap"]["data"]["gateway.yaml"]), source="gateway.yaml"
    )
    (container,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert config.server.host == "0.0.0.0"
    assert config.server.port == container["ports"][0]["containerPort"]
    # The probes and the ServiceMonitor send no key: with tenants, /healthz and /metrics
    # must be open, or no pod ever becomes ready.
    assert config.tenants
    assert config.server.metrics_auth is False
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert str(config.recording.directory) == mounts["recordings"]
    assert container["args"][-1].startswith(mounts["config"] + "/")
    # A read-only root needs a writable temporary directory for the workers' metrics.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert mounts["tmp"] == "/tmp"  # where tempfile looks when TMPDIR is not set
    volumes = docs["Deployment"]["spec"]["template"]["spec"]["volumes"]
    assert "emptyDir" in next(v for v in volumes if v["name"] == "tmp")


# -- the Grafana dashboard across replicas --------------------------------------------------------

DASHBOARD = ROOT / "deploy" / "grafana" / "steadystream-gateway.json"
_SELECTOR = re.compile(r"\bsteadystream_[a-z0-9_]+(\{[^}]*\})?")


def test_every_dashboard_query_sums_over_replicas_of_the_chosen_job() -> None:
    board = json.loads(DASHBOARD.read_text())
    assert "job" in {v["name"] for v in board["templating"]["list"]}
    for panel in board["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            # Each replica (and worker) is its own series: a query that does not aggregate
            # would draw one line per pod, or a quantile of one pod's streams only.
            assert expr.startswith(("sum", "histogram_quantile(0")), expr
            for selector in _SELECTOR.finditer(expr):
                assert 'job=~"$job"' in (selector.group(1) or ""), expr
            if "instance" in expr:
                assert "by (instance)" in expr, expr
