"""deploy/kubernetes/redis.yaml: schema-valid, and the store the gateway's ConfigMap names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from steadystream.gateway.config import config_from_mapping

DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes"


def documents(name: str) -> dict[str, dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]
    return {d["kind"]: d for d in docs}


def test_the_redis_manifests_are_schema_valid() -> None:
    docs = documents("redis.yaml")
    assert set(docs) == {"Deployment", "Service"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, "1.30", strict=True)


def test_the_gateway_uses_the_redis_the_manifest_serves() -> None:
    redis = documents("redis.yaml")
    gateway = documents("gateway.yaml")
    config = config_from_mapping(yaml.safe_load(gateway["ConfigMap"]["data"]["gateway.yaml"]))
    service = redis["Service"]
    port = service["spec"]["ports"][0]["port"]
    assert config.resume.store == f"redis://{service['metadata']['name']}:{port}/0"
    pod = redis["Deployment"]["spec"]["template"]
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"  # never a silent gap
