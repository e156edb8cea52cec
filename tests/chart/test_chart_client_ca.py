"""clientCA: optional mutual TLS. Off by default; on, the CA from a Secret or a ConfigMap is
mounted read-only and passed as --client-ca, and the server then refuses other clients."""

from __future__ import annotations

from typing import Any

import pytest
from chart_helpers import FULLNAME, find, helm_template, helm_template_raw


def _container(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_off_by_default() -> None:
    pod, container = _container(helm_template())
    assert not any(a.startswith("--client-ca") for a in container["args"])
    assert "client-ca" not in {v["name"] for v in pod["volumes"]}


@pytest.mark.parametrize(("source", "field"), [
    ({"secretName": "apiserver-client-ca"}, "secret"),
    ({"configMapName": "apiserver-client-ca"}, "configMap"),
])
def test_enabled_mounts_the_ca_and_passes_client_ca(source: dict[str, str],
                                                    field: str) -> None:
    docs = helm_template({"clientCA": {"enabled": True, "key": "bundle.pem", **source}})
    pod, container = _container(docs)
    assert "--client-ca=/etc/quickq-guard/client-ca/bundle.pem" in container["args"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "client-ca"]
    assert volume[field]["items"] == [{"key": "bundle.pem", "path": "bundle.pem"}]
    name = volume[field].get("secretName") or volume[field].get("name")
    assert name == "apiserver-client-ca"
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "client-ca"]
    assert mount == {"name": "client-ca", "mountPath": "/etc/quickq-guard/client-ca",
                     "readOnly": True}


@pytest.mark.parametrize("values", [
    {"clientCA": {"enabled": True}},
    {"clientCA": {"enabled": True, "secretName": "a", "configMapName": "b"}},
])
def test_enabled_needs_exactly_one_source(values: dict[str, Any]) -> None:
    proc = helm_template_raw(values)
    assert proc.returncode != 0
    assert "exactly one of clientCA.secretName and clientCA.configMapName" in proc.stderr


@pytest.mark.parametrize(("values", "problem"), [
    ({"clientCA": {"enabled": "yes"}}, "/clientCA/enabled"),
    ({"clientCA": {"enabled": True, "secretName": "a", "key": "../x"}}, "/clientCA/key"),
    ({"clientCA": {"enable": True}}, "'enable'"),
])
def test_schema_checks_client_ca(values: dict[str, Any], problem: str) -> None:
    proc = helm_template_raw(values)
    assert proc.returncode != 0 and problem in proc.stderr, proc.stderr


def test_pod_runs_non_root_without_privileges_by_default() -> None:
    """What test_chart_deployment does not assert yet: the pod-level non-root default and
    the container's privileged: false."""
    pod, container = _container(helm_template())
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert container["securityContext"]["privileged"] is False
