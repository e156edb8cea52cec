"""`quickq-guard export --format vap` (admissionregistration.k8s.io/v1) applied to the real
API server: with no webhook registered, its own ValidatingAdmissionPolicies deny what the
webhook's engine denies, warn where it warns, on the same objects, and name the same policy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    REPO,
    ControlPlane,
    Guard,
    container,
    controller,
    dry_run_create,
    export,
    exported_in_force,
    pod,
)

from webhook import Decision, Review, decode, evaluate, load_policies

POLICIES = REPO / "tests" / "vap_policies"
NAMESPACE = "vap-export"
SANDBOX = "sandbox-vap"  # allowed-registries leaves sandbox-* alone
_DENIED_BY = re.compile(r"ValidatingAdmissionPolicy '([^']+)' with binding '[^']+' denied "
                        r"request: (.*)$", re.MULTILINE)
_WARNED_BY = re.compile(r"^Warning: Validation failed for ValidatingAdmissionPolicy "
                        r"'([^']+)' with binding '[^']+': (.*)$", re.MULTILINE)


@pytest.fixture(scope="module")
def exported(guard: Guard, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """The exported policies in force, with quickq-guard's webhooks unregistered, so that
    every denial comes from the API server's own admission policies. (The chart's own
    Deployment would not pass allowed-registries when the webhooks are registered again:
    they are gone first.)"""
    plane = guard.plane
    plane.namespace(NAMESPACE)
    plane.namespace(SANDBOX)
    out = tmp_path_factory.mktemp("vap") / "vap.yaml"
    export("vap", out, "--policies", str(POLICIES))
    probe = pod("vap-probe", NAMESPACE, container(
        image="registry.example.com/web:1.0", securityContext={"privileged": True}))
    with exported_in_force(guard, out, lambda: dry_run_create(plane, probe).returncode != 0,
                           lambda: dry_run_create(plane, probe).returncode == 0,
                           what="the exported admission policies"):
        yield plane


def _engine(obj: dict[str, Any]) -> Decision:
    return evaluate(decode(obj),
                    load_policies(POLICIES),
                    Review(namespace=obj["metadata"]["namespace"]))


def _denied_by(decision: Decision) -> set[str]:
    return {f"quickq-guard-{r.policy}" for r in decision.results
            if r.status == "fail" and r.action == "enforce"}


def _warned_by(decision: Decision) -> set[str]:
    return {f"quickq-guard-{r.policy}" for r in decision.results
            if r.status == "fail" and r.action == "warn"}


def _gpu(obj: dict[str, Any]) -> dict[str, Any]:
    obj["metadata"]["labels"]["tier"] = "gpu"
    return obj


def _node_template(name: str, image: str) -> dict[str, Any]:
    """The example NodeTemplate (the chart installs its CRD) with another image."""
    obj: dict[str, Any] = yaml.safe_load((REPO / "examples" / "good" / "nodetemplate.yaml")
                                         .read_text())
    obj["metadata"].update(name=name, namespace=NAMESPACE)
    obj["spec"]["image"] = image
    return obj


OTHER = "docker.io/library/redis:7.2"
OBJECTS = {
    "compliant-pod": pod("ok", NAMESPACE, container()),
    "foreign-image": pod("foreign", NAMESPACE, container(image=OTHER)),
    "foreign-init-image": pod("foreign-init", NAMESPACE, container(),
                              initContainers=[container("init", image=OTHER)]),
    "foreign-image-in-sandbox": pod("sandboxed", SANDBOX, container(image=OTHER)),
    "privileged": pod("priv", NAMESPACE, container(securityContext={"privileged": True})),
    "privileged-deployment": controller("Deployment", "priv-deploy", NAMESPACE, {
        "containers": [container(securityContext={"privileged": True})]}),
    "foreign-cronjob": controller("CronJob", "foreign-cron", NAMESPACE, {
        "containers": [container(image=OTHER)]}),
    "privileged-statefulset": controller("StatefulSet", "priv-sts", NAMESPACE, {
        "containers": [container(securityContext={"privileged": True})]}),
    "host-network": pod("hostnet", NAMESPACE, container(), hostNetwork=True),
    "gpu-init-without-limit": _gpu(pod("gpu-init", NAMESPACE, container(), initContainers=[
        container("init", resources={"requests": {"cpu": "10m", "memory": "16Mi"}})])),
    "gpu-init-with-limit": _gpu(pod("gpu-init-ok", NAMESPACE, container(), initContainers=[
        container("init", resources={"requests": {"cpu": "10m", "memory": "16Mi"},
                                     "limits": {"memory": "16Mi"}})])),
    "cpu-init-without-limit": pod("cpu-init", NAMESPACE, container(), initContainers=[
        container("init", resources={"requests": {"cpu": "10m", "memory": "16Mi"}})]),
    "node-template": _node_template("nt-ok", "registry.example.com/model-server:2.0.1"),
    "foreign-node-template": _node_template("nt-foreign", OTHER),
}


@pytest.mark.parametrize("name", OBJECTS)
def test_the_api_server_denies_what_the_webhook_denies(exported: ControlPlane, name: str):
    obj = OBJECTS[name]
    decision = _engine(obj)
    done = dry_run_create(exported, obj)
    denied = {policy for policy, _ in _DENIED_BY.findall(done.stderr)}
    warned = {policy for policy, _ in _WARNED_BY.findall(done.stderr)}
    assert (done.returncode != 0) == (not decision.allowed), (done.stderr, decision.message)
    # The API server reports the first policy that denies; the engine all of them.
    assert denied <= _denied_by(decision) and bool(denied) == bool(_denied_by(decision))
    if decision.allowed:
        assert warned == _warned_by(decision)
    # The messages name the container and say what to change, as the webhook's findings do.
    for policy, message in _DENIED_BY.findall(done.stderr):
        findings = [f.message for r in decision.results if f"quickq-guard-{r.policy}" == policy
                    for f in r.findings]
        assert message == "; ".join(findings)


def test_the_cases_exercise_every_exported_policy() -> None:
    named: set[str] = set()
    for obj in OBJECTS.values():
        decision = _engine(obj)
        named |= _denied_by(decision) | _warned_by(decision)
    assert named == {f"quickq-guard-{p.stem}" for p in Path(POLICIES).glob("*.yaml")}


@pytest.mark.parametrize("level", ["baseline", "restricted"])
def test_the_pod_security_profiles_export_to_policies_the_api_server_accepts(
        guard: Guard, tmp_path: Path, level: str) -> None:
    """The shipped Pod Security controls, exported, are created by the real API server: its
    CEL refuses list literals of mixed types (`[0, null]`), which three controls had."""
    config = tmp_path / "config.yaml"
    config.write_text(f"podSecurity: {{enforce: {level}}}\n")
    out = tmp_path / "vap.yaml"
    done = export("vap", out, "--config", str(config))
    exported = [doc["metadata"]["name"] for doc in yaml.safe_load_all(out.read_text())
                if doc and doc["kind"] == "ValidatingAdmissionPolicy"]
    assert sum(name.startswith("quickq-guard-pss-") for name in exported) >= 10, done.stderr
    created = guard.plane.kubectl("apply", "--dry-run=server", "-f", str(out), check=False)
    assert created.returncode == 0, created.stderr
