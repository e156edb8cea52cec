"""Bindings that mean what the policies mean, on the real API server: with quickq-guard's
webhooks unregistered, the exported policies of tests/binding_policies/ deny (enforce), warn
(warn) and audit (audit) where the engine does, and leave alone what the config excludes:
namespaces by name and by glob, users by glob, groups; the mutate policy (a
MutatingAdmissionPolicy, served from 1.36) patches where the engine patches. Each case is
also judged by the engine, and the two verdicts agree. Where MutatingAdmissionPolicy v1 is
not served (1.35), the ValidatingAdmissionPolicies alone are exported and checked."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    MUTATING,
    REPO,
    VALIDATING,
    ControlPlane,
    Guard,
    container,
    export,
    exported_in_force,
    pod,
    wait_until,
    warnings_of,
)

from webhook import Config, Decision, Review, decode, evaluate, load_policies

POLICIES = REPO / "tests" / "binding_policies"
CONFIG = {"excludeNamespaces": ["kube-system", "skipped", "dev-*"],
          "excludeUsers": ["ci-*"], "excludeGroups": ["ops"]}
NAMESPACE = "bindings"
MAP_RESOURCE = "mutatingadmissionpolicies.admissionregistration.k8s.io"
AUDIT_KEY = "validation.policy.admission.k8s.io/validation_failure"


def _serves_map(plane: ControlPlane) -> bool:
    return MAP_RESOURCE in plane.kubectl("api-resources", "--api-group=admissionregistration"
                                         ".k8s.io", "-o", "name").stdout.split()


@pytest.fixture(scope="module")
def exported(guard: Guard, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = guard.plane
    for namespace in (NAMESPACE, "skipped", "dev-team"):
        plane.namespace(namespace)
    # Users the cases impersonate may create pods (admission comes after authorization).
    plane.kubectl("create", "clusterrolebinding", "export-bindings", "--clusterrole=cluster-admin",
                  "--user=ci-bot", "--user=alice", check=False)
    workdir = tmp_path_factory.mktemp("bindings")
    config = workdir / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    out = workdir / "native.yaml"
    native = _serves_map(plane)
    export("native" if native else "vap", out, "--policies", str(POLICIES), "--config",
           str(config))
    privileged = _pod("probe", privileged=True)

    def in_force() -> bool:  # the mutating policies load on their own schedule
        return _create(plane, privileged).returncode != 0 and (
            not native or "judged" in _labels(_create(plane, _pod("probe"))))

    try:
        with exported_in_force(guard, out, in_force,
                               lambda: _create(plane, privileged).returncode == 0,
                               VALIDATING + MUTATING if native else VALIDATING):
            yield plane
    finally:
        plane.kubectl("delete", "clusterrolebinding", "export-bindings", check=False)


def _pod(name: str, namespace: str = NAMESPACE, privileged: bool = False,
         **fields: Any) -> dict[str, Any]:
    extra = {"securityContext": {"privileged": True}} if privileged else {}
    return pod(name, namespace, container(**extra), **fields)


def _as(user: str | None, groups: tuple[str, ...]) -> list[str]:
    if user is None:
        return []
    return [f"--as={user}", *(f"--as-group={group}" for group in groups)]


def _create(plane: ControlPlane, obj: dict[str, Any], *args: str,
            dry_run: bool = True) -> subprocess.CompletedProcess[str]:
    return plane.kubectl("create", *(["--dry-run=server"] if dry_run else []), "-o", "json",
                         "-f", "-", *args, input=json.dumps(obj), check=False)


def _labels(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    if done.returncode != 0:
        return {}
    labels: dict[str, str] = json.loads(done.stdout)["metadata"].get("labels", {})
    return labels


def _engine(obj: dict[str, Any], user: str | None, groups: tuple[str, ...]) -> Decision:
    return evaluate(decode(obj), load_policies(POLICIES, Config.model_validate(CONFIG)),
                    Review(namespace=obj["metadata"]["namespace"], username=user or "admin",
                           groups=groups or (("system:masters",) if user is None else ())))


CASES = {  # name: (namespace, user, groups, pod fields, privileged)
    "privileged": (NAMESPACE, None, (), {}, True),
    "host-network": (NAMESPACE, None, (), {"hostNetwork": True}, False),
    "compliant": (NAMESPACE, None, (), {}, False),
    "excluded-namespace": ("skipped", None, (), {}, True),
    "excluded-namespace-glob": ("dev-team", None, (), {}, True),
    "excluded-user-glob": (NAMESPACE, "ci-bot", (), {}, True),
    "excluded-group": (NAMESPACE, "alice", ("ops",), {}, True),
    "user-not-excluded": (NAMESPACE, "alice", ("devs",), {}, True),
}


@pytest.mark.parametrize("case", CASES)
def test_the_native_verdict_is_the_engines(exported: ControlPlane, case: str) -> None:
    namespace, user, groups, fields, privileged = CASES[case]
    obj = _pod(case, namespace, privileged, **fields)
    decision = _engine(obj, user, groups)
    done = _create(exported, obj, *_as(user, groups))
    assert (done.returncode == 0) == decision.allowed, (done.stderr, decision.message)
    if not decision.allowed:
        assert "ValidatingAdmissionPolicy 'quickq-guard-no-privileged'" in done.stderr
        assert "runs privileged" in done.stderr
        return
    warned = [w for w in warnings_of(done.stderr) if "quickq-guard-" in w]
    assert bool(warned) == bool(decision.warnings), (warned, decision.warnings)
    assert all("quickq-guard-no-host-network" in w for w in warned)
    if _serves_map(exported):
        labels = _labels(done)
        patched = any(r.status == "patch" for r in decision.results)
        assert ("judged" in labels) == patched, (labels, decision.results)


def test_audit_findings_are_in_the_api_servers_audit_log(exported: ControlPlane) -> None:
    obj = _pod("host-pid", hostPID=True)
    assert not _engine(obj, None, ()).warnings  # audit: admitted, no warning
    done = _create(exported, obj, dry_run=False)
    assert done.returncode == 0, done.stderr
    assert [w for w in warnings_of(done.stderr) if "quickq-guard-" in w] == []
    found: list[str] = []

    def logged() -> bool:
        found[:] = [event.get("annotations", {}).get(AUDIT_KEY, "")
                    for event in exported.audit_events()
                    if event.get("verb") == "create" and event.get("stage") == "ResponseComplete"
                    and event.get("objectRef", {}).get("name") == "host-pid"]
        return any(found)

    wait_until(logged, what="the audit event of pod host-pid")
    assert "quickq-guard-no-host-pid" in found[-1]
    exported.kubectl("delete", "pod", "host-pid", "-n", NAMESPACE, "--wait=false")

