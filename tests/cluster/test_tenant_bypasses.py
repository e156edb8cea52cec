"""The bypasses a tenant tries first, through a real API server with the chart's webhooks and
impersonated users who hold only the RBAC rights a self-service cluster gives them:

- opting a namespace out (creating one whose name is never judged, or one labelled
  quickq.io/ignore=true, or adding the label later) is denied unless the requester is in
  config.optOutGroups (system:masters here: the admin);
- a mirror pod skips judgement only when a kubelet (system:node:* in system:nodes) makes it;
- an UPDATE keeps an old violation only with the same value: `kubectl set image` to another
  :latest image, or a new literal password, is denied on objects that predate the policy.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from cluster_helpers import (
    ControlPlane,
    Guard,
    acting_as,
    container,
    controller,
    pod,
    pod_spec,
    warnings_of,
)

NAMESPACE = "tenant-bypasses"
NAMESPACES_WEBHOOK = 'admission webhook "namespaces.quickq-guard.quickq.io" denied the request'
VALIDATING = 'admission webhook "validate.quickq-guard.quickq.io" denied the request'
IGNORED = {"quickq.io/ignore": "true"}
MIRROR = {"kubernetes.io/config.mirror": "abc"}
OLD_LITERAL = "old-literal-Secret-1"
NEW_LITERAL = "new-literal-Secret-2"


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    """The module's namespace, and a Pod and a Deployment created while no webhook was
    registered, each breaking a policy: what a cluster holds when quickq-guard arrives."""
    plane = guard.plane
    plane.namespace(NAMESPACE)
    with guard.paused():
        pre = pod("pre", NAMESPACE, container("app", image="registry.example.com/app:latest"))
        deployment = controller("Deployment", "pre-deploy", NAMESPACE, pod_spec(container(
            "app", env=[{"name": "DB_PASSWORD", "value": OLD_LITERAL}])))
        for obj in (pre, deployment):
            done = plane.apply(obj)
            assert done.returncode == 0, done.stderr
    return plane


def namespace(name: str, labels: dict[str, str] | None = None) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "labels": labels or {}}})


def create(kube: ControlPlane, manifest: str, *flags: str,
           dry_run: bool = True) -> subprocess.CompletedProcess[str]:
    run = ["create", *(["--dry-run=server"] if dry_run else []), "-f", "-", *flags]
    return kube.kubectl(*run, input=manifest, check=False)


@pytest.fixture(scope="module")
def tenant(kube: ControlPlane) -> list[str]:
    """A self-service tenant: may create namespaces, nothing more."""
    return acting_as(kube, "tenant", [{"apiGroups": [""], "resources": ["namespaces"],
                                       "verbs": ["create"]}])


@pytest.fixture(scope="module")
def editor(kube: ControlPlane) -> list[str]:
    """A tenant who may also update namespaces (label them), not in optOutGroups."""
    return acting_as(kube, "namespace-editor", [{
        "apiGroups": [""], "resources": ["namespaces"],
        "verbs": ["create", "get", "update", "patch"]}])


@pytest.mark.parametrize("name", ["longhorn-system", "openebs", "kube-flannel"])
def test_a_tenant_cannot_create_a_namespace_that_is_never_judged(
        kube: ControlPlane, tenant: list[str], name: str) -> None:
    done = create(kube, namespace(name), *tenant)
    assert done.returncode == 1
    assert NAMESPACES_WEBHOOK in done.stderr
    assert f"[namespace-opt-out] namespace {name} is one quickq-guard never judges" in \
        done.stderr
    assert "only members of system:masters, kubeadm:cluster-admins may create it" in \
        done.stderr


def test_a_tenant_cannot_create_a_namespace_born_with_the_ignore_label(
        kube: ControlPlane, tenant: list[str]) -> None:
    done = create(kube, namespace("team-born-ignored", IGNORED), *tenant)
    assert done.returncode == 1
    assert NAMESPACES_WEBHOOK in done.stderr
    assert "the label quickq.io/ignore=true leaves every pod of the namespace unjudged" in \
        done.stderr


def test_a_tenant_creates_namespaces_but_cannot_add_the_ignore_label_later(
        kube: ControlPlane, tenant: list[str], editor: list[str]) -> None:
    made = create(kube, namespace("team-tenant"), *tenant, dry_run=False)
    assert made.returncode == 0, made.stderr
    labelled = kube.kubectl("label", "namespace", "team-tenant", "team=a", *editor,
                            check=False)
    assert labelled.returncode == 0, labelled.stderr  # not an opt-out
    done = kube.kubectl("label", "namespace", "team-tenant", "quickq.io/ignore=true",
                        *editor, check=False)
    assert done.returncode == 1
    assert NAMESPACES_WEBHOOK in done.stderr and "quickq.io/ignore=true" in done.stderr
    stored = json.loads(kube.kubectl("get", "namespace", "team-tenant", "-o", "json")
                        .stdout)["metadata"]["labels"]
    assert "quickq.io/ignore" not in stored and stored["team"] == "a"


def test_an_administrator_may_opt_namespaces_out(kube: ControlPlane) -> None:
    for manifest in (namespace("longhorn-system"), namespace("team-admin-ignored", IGNORED)):
        done = create(kube, manifest)
        assert done.returncode == 0, done.stderr
    kube.namespace("team-admin")
    done = kube.kubectl("label", "namespace", "team-admin", "quickq.io/ignore=true",
                        "--dry-run=server", check=False)
    assert done.returncode == 0, done.stderr


def mirror_pod(name: str) -> str:
    obj = pod(name, NAMESPACE, container("app", image="nginx:latest"))
    obj["metadata"]["annotations"] = MIRROR
    obj["spec"]["nodeName"] = "gpu-1"
    return json.dumps(obj)


def test_a_mirror_pod_from_anyone_but_a_kubelet_is_judged(kube: ControlPlane) -> None:
    """A Pod carrying the annotation, from an ordinary user with the right to create Pods."""
    user = acting_as(kube, "pod-creator", [{"apiGroups": [""], "resources": ["pods"],
                                            "verbs": ["create"]}])
    for flags in (user, []):  # the tenant, and the admin (system:masters is no node)
        done = create(kube, mirror_pod("spoofed"), *flags)
        assert done.returncode == 1, done.stdout
        assert VALIDATING in done.stderr
        assert "[disallow-latest-tag] container 'app'" in done.stderr


def test_a_mirror_pod_a_kubelet_makes_is_left_alone(kube: ControlPlane) -> None:
    node = acting_as(kube, "system:node:gpu-1", [{"apiGroups": [""], "resources": ["pods"],
                                                  "verbs": ["create"]}],
                     groups=("system:nodes",))
    done = create(kube, mirror_pod("static-web-gpu-1"), *node)
    assert done.returncode == 0, done.stderr
    assert not [w for w in warnings_of(done.stderr) if w.startswith("[")]


def test_set_image_to_another_latest_image_on_a_pod_that_predates_the_policy_is_denied(
        kube: ControlPlane) -> None:
    done = kube.kubectl("set", "image", "pod/pre", "-n", NAMESPACE,
                        "app=attacker/miner:latest", check=False)
    assert done.returncode == 1
    assert VALIDATING in done.stderr
    assert "[disallow-latest-tag] container 'app': image 'attacker/miner:latest'" in \
        done.stderr
    stored = kube.get("pod", "pre", NAMESPACE)
    assert stored["spec"]["containers"][0]["image"] == "registry.example.com/app:latest"


def test_an_update_keeping_the_same_old_value_passes_with_a_warning(
        kube: ControlPlane) -> None:
    done = kube.kubectl("label", "pod", "pre", "-n", NAMESPACE, "team=ml")
    assert kube.get("pod", "pre", NAMESPACE)["metadata"]["labels"]["team"] == "ml"
    [warning] = [w for w in warnings_of(done.stderr) if w.startswith("[disallow-latest-tag]")]
    assert warning.endswith("(already violated before this update)")
    done = kube.kubectl("label", "deployment", "pre-deploy", "-n", NAMESPACE, "team=ml")
    [warning] = [w for w in warnings_of(done.stderr)
                 if w.startswith("[no-plaintext-secrets]")]
    assert "env DB_PASSWORD holds a literal value" in warning
    assert warning.endswith("(already violated before this update)")
    assert OLD_LITERAL not in done.stderr


def test_a_new_literal_value_of_a_secret_variable_is_denied_and_never_shown(
        kube: ControlPlane) -> None:
    done = kube.kubectl("set", "env", "deployment/pre-deploy", "-n", NAMESPACE,
                        f"DB_PASSWORD={NEW_LITERAL}", check=False)
    assert done.returncode == 1
    assert VALIDATING in done.stderr
    assert "env DB_PASSWORD holds a literal value" in done.stderr
    assert NEW_LITERAL not in done.stderr and OLD_LITERAL not in done.stderr
    stored = kube.get("deployment", "pre-deploy", NAMESPACE)
    assert stored["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "DB_PASSWORD", "value": OLD_LITERAL}]
