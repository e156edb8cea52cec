"""Render the chart in every supported configuration and check the output is
what a Kubernetes 1.35 API server and kubectl accept."""

from __future__ import annotations

import itertools
import tarfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_helpers import (
    CHART,
    FULLNAME,
    KUBE_VERSION,
    REPO,
    find,
    helm_lint,
    helm_template,
    kinds,
    kubectl_dry_run,
    run,
    tool,
)

from webhook import Config

CERT_MODES = ["helm", "cert-manager", "secret"]
MODES = ["enforce", "dry-run"]
CRD = [False, True]
# Kinds from CRDs that kubernetes_validate ships no schema for. They are
# loaded by kubectl (API mapping) but not schema-checked here.
UNVALIDATED_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}


def values_for(cert_mode: str, mode: str, crd: bool, ca_bundle: str) -> dict[str, Any]:
    values: dict[str, Any] = {"mode": mode, "crd": {"install": crd},
                              "certs": {"mode": cert_mode}}
    if cert_mode == "secret":
        values["certs"]["secret"] = {"name": "my-webhook-tls", "caBundle": ca_bundle}
    return values


MATRIX = list(itertools.product(CERT_MODES, MODES, CRD))
IDS = [f"{c}-{m}-{'crd' if d else 'nocrd'}" for c, m, d in MATRIX]


def validate_all(docs: list[dict[str, Any]]) -> set[str]:
    """Validate each manifest against the Kubernetes schemas; return skipped kinds."""
    skipped: set[str] = set()
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            skipped.add(doc["kind"])
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {err.message} "
                        f"at {list(err.path)}")
    return skipped


@pytest.mark.parametrize(("cert_mode", "mode", "crd"), MATRIX, ids=IDS)
def test_lint_passes(cert_mode: str, mode: str, crd: bool, external_ca_bundle: str) -> None:
    proc = helm_lint(values_for(cert_mode, mode, crd, external_ca_bundle))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(("cert_mode", "mode", "crd"), MATRIX, ids=IDS)
def test_render_is_valid_kubernetes(cert_mode: str, mode: str, crd: bool,
                                    external_ca_bundle: str) -> None:
    docs = helm_template(values_for(cert_mode, mode, crd, external_ca_bundle))
    skipped = validate_all(docs)
    # Only CRD-defined kinds may go unvalidated, and only in the mode that uses them.
    expected_skips = {"Certificate", "Issuer"} if cert_mode == "cert-manager" else set()
    assert skipped == expected_skips, f"kinds without a Kubernetes schema: {skipped}"
    crds = {d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert ("nodetemplates.quickq.io" in crds) is crd
    assert ("Secret" in kinds(docs)) is (cert_mode == "helm")


@pytest.mark.parametrize(("cert_mode", "mode", "crd"), MATRIX, ids=IDS)
def test_kubectl_loads_render(cert_mode: str, mode: str, crd: bool,
                              external_ca_bundle: str) -> None:
    docs = helm_template(values_for(cert_mode, mode, crd, external_ca_bundle))
    proc = kubectl_dry_run(docs)
    assert proc.returncode == 0, proc.stderr
    loaded = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = sorted((d["kind"], d["metadata"]["name"]) for d in loaded)
    assert names == sorted((d["kind"], d["metadata"]["name"]) for d in docs)


def test_mode_reaches_server_and_config() -> None:
    for mode in MODES:
        docs = helm_template({"mode": mode})
        pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
        args = pod["containers"][0]["args"]
        assert f"--mode={mode}" in args
        config = yaml.safe_load(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]
                                ["config.yaml"])
        assert config["mode"] == mode


def test_optional_objects_render_valid() -> None:
    """HPA, NetworkPolicy, ServiceMonitor and priority class, all switched on."""
    docs = helm_template({
        "autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 6},
        "networkPolicy": {"enabled": True},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "priorityClassName": "system-cluster-critical",
    })
    assert validate_all(docs) == {"ServiceMonitor"}
    assert kubectl_dry_run(docs).returncode == 0
    hpa = find(docs, "HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    deployment = find(docs, "Deployment", FULLNAME)
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == \
        "system-cluster-critical"
    policy = find(docs, "NetworkPolicy", FULLNAME)["spec"]
    assert policy["policyTypes"] == ["Ingress"]
    assert policy["ingress"] == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]
    endpoint = find(docs, "ServiceMonitor", FULLNAME)["spec"]["endpoints"][0]
    assert (endpoint["scheme"], endpoint["path"], endpoint["port"]) == \
        ("https", "/metrics", "https")
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": f"{FULLNAME}-tls",
                                                     "key": "ca.crt"}


def test_optional_objects_off_by_default() -> None:
    rendered = kinds(helm_template())
    for kind in ("HorizontalPodAutoscaler", "NetworkPolicy", "ServiceMonitor"):
        assert kind not in rendered
    # The only CRDs by default are the audit's reports' (audit.installCRDs: auto).
    assert {d["metadata"]["name"] for d in helm_template()
            if d["kind"] == "CustomResourceDefinition"} == {"reports.openreports.io",
                                                             "clusterreports.openreports.io"}


def test_single_replica_gets_no_blocking_pdb() -> None:
    """A PDB with minAvailable 1 over one pod would block every node drain."""
    assert "PodDisruptionBudget" in kinds(helm_template())
    assert "PodDisruptionBudget" not in kinds(helm_template({"replicaCount": 1}))


def test_packaged_chart_carries_policies_and_crd_schema(tmp_path: Path) -> None:
    """`helm package` follows the policies symlink, so a published chart is complete."""
    proc = run([tool("helm"), "package", CHART, "--destination", tmp_path])
    assert proc.returncode == 0, proc.stderr
    (archive,) = tmp_path.glob("quickq-guard-*.tgz")
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
    policies = {f"quickq-guard/policies/{p.name}" for p in (REPO / "policies").glob("*.yaml")}
    assert policies and policies <= names
    assert "quickq-guard/files/nodetemplate-schema.json" in names
    assert "quickq-guard/values.schema.json" in names


def test_pod_security_profiles_reach_the_config() -> None:
    """config.podSecurity switches the shipped Pod Security Standards profiles on."""
    def config_of(docs: list[Any]) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load(
            find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]["config.yaml"])
        return loaded

    assert "podSecurity" not in config_of(helm_template())
    rendered = config_of(helm_template({"config": {"podSecurity": {
        "enforce": "baseline", "warn": "restricted"}}}))
    settings = Config.model_validate(rendered).podSecurity
    assert (settings.enforce, settings.warn, settings.audit) == ("baseline", "restricted", None)
