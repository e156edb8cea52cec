"""The Pod Security Standards profiles against the Kubernetes Pod Security Admission (PSA)
controller built into the real kube-apiserver: the same Pods (tests/pod_security_cases.py: each
control violated alone, at pod and container level, in init and ephemeral containers, and
compliant ones) go through PSA, in namespaces labelled to enforce each profile at v1.28 (the
version of the Standards the profile files encode; PSA keeps every older version), and
through quickq-guard's engine with the profile switched on. Object by object, both must
allow or deny, and name the same controls."""

from __future__ import annotations

import json
import re

import pytest
from cluster_helpers import ControlPlane
from pod_security_cases import CASES, Case, policy_for

from webhook import Config, Decision, PolicySet, Review, decode, evaluate, load_policies

VERSION = "v1.28"
_VERDICT = re.compile(r'violates PodSecurity "(baseline|restricted):v\d+\.\d+": (.*)$',
                      re.MULTILINE)


@pytest.fixture(scope="module")
def namespaces(plane: ControlPlane) -> dict[str, str]:
    """A namespace per profile, labelled as a cluster admin enforces Pod Security."""
    names = {}
    for level in ("baseline", "restricted"):
        names[level] = plane.namespace(f"pss-{level}", {
            "pod-security.kubernetes.io/enforce": level,
            "pod-security.kubernetes.io/enforce-version": VERSION})
    return names


@pytest.fixture(scope="module")
def profiles() -> dict[str, PolicySet]:
    return {level: load_policies(None, Config.model_validate({"podSecurity": {
        "enforce": level, "version": VERSION}})) for level in ("baseline", "restricted")}


def psa_controls(stderr: str) -> tuple[str, set[str]] | None:
    """The profile and the controls a PSA denial names, as quickq-guard policy ids; None when
    the message is no PSA denial."""
    found = _VERDICT.search(stderr)
    if found is None:
        return None
    level, reasons = found.groups()
    return level, {policy_for(reason, level) for reason in _reasons(reasons)}


def _reasons(text: str) -> list[str]:
    """`a (detail, with commas), b (detail)` -> ['a', 'b']: split at top-level commas."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    return [item.strip().split(" (")[0] for item in items if item.strip()]


def psa_verdict(plane: ControlPlane, case: Case, namespace: str) -> set[str]:
    """The controls PSA names for the case's Pod (none when it admits it): a server-side dry
    run of the create, or of the ephemeral-containers update of a Pod created first."""
    obj = case.pod(namespace)
    if not case.ephemeral:
        done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(obj),
                             check=False)
    else:
        plane.kubectl("delete", "pod", case.name, "-n", namespace, "--ignore-not-found",
                      "--wait=false")
        plane.kubectl("create", "-f", "-", input=json.dumps(obj))
        stored = plane.get("pod", case.name, namespace)
        done = plane.kubectl(
            "replace", "--raw",
            f"/api/v1/namespaces/{namespace}/pods/{case.name}/ephemeralcontainers?dryRun=All",
            "-f", "-", input=json.dumps(case.with_ephemeral(stored)), check=False)
    if done.returncode == 0:
        return set()
    verdict = psa_controls(done.stderr)
    if verdict is None:
        # Validating webhooks run after PSA: a webhook denial means PSA admitted the Pod.
        assert "admission webhook" in done.stderr, done.stderr
        return set()
    level, controls = verdict
    assert level == case.level
    return controls


def engine_verdict(profiles: dict[str, PolicySet], case: Case, namespace: str) -> Decision:
    obj = case.pod(namespace)
    if not case.ephemeral:
        return evaluate(decode(obj), profiles[case.level])
    return evaluate(decode(case.with_ephemeral(obj)),
                    profiles[case.level],
                    Review(operation="UPDATE", old_object=decode(obj)))


def failed_controls(decision: Decision) -> set[str]:
    assert not [r for r in decision.results if r.status == "error"], decision.results
    return {str(r.policy) for r in decision.results
            if r.status == "fail" and str(r.policy).startswith("pss-")}


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_quickq_guard_names_the_controls_pod_security_admission_names(
        plane: ControlPlane, namespaces: dict[str, str], profiles: dict[str, PolicySet],
        case: Case) -> None:
    namespace = namespaces[case.level]
    expected_by_psa = psa_verdict(plane, case, namespace)
    decision = engine_verdict(profiles, case, namespace)
    ours = failed_controls(decision)
    assert ours == expected_by_psa, (case.name, decision.message)
    assert ours == set(case.expect)
    pss_denials = [line for line in decision.message.splitlines() if "[pss-" in line]
    assert bool(pss_denials) == bool(expected_by_psa)


def test_the_cases_cover_every_control() -> None:
    named: set[str] = set()
    for case in CASES:
        named |= case.expect
    assert named == {
        "pss-privileged", "pss-host-process", "pss-host-namespaces",
        "pss-capabilities-baseline", "pss-host-path-volumes", "pss-host-ports", "pss-apparmor",
        "pss-selinux", "pss-proc-mount", "pss-seccomp-baseline", "pss-sysctls",
        "pss-volume-types",
        "pss-privilege-escalation", "pss-run-as-non-root", "pss-run-as-user",
        "pss-seccomp-restricted", "pss-capabilities-restricted"}
