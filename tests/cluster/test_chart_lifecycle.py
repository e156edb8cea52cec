"""The chart's life on a real API server, state by state, as README "What the cluster does in
each state" says: installing with no webhook answering (everything admitted), the arm hook
that gives up and the one that switches failurePolicy, an upgrade that keeps the armed
policy, all replicas down (refused, except what is never judged), and the pre-delete hook.

No pod ever runs here (no kubelet), so the hook Jobs cannot run: the chart is installed with
--no-hooks and each hook's command is run from here with a token of the hooks' own
ServiceAccount and the RBAC the chart renders for it, as the Job would run it. The webhook is
a `quickq-guard serve` on loopback, registered by URL (webhook.url)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import (
    CHART,
    REPO,
    ControlPlane,
    Webhook,
    chart_runtime_files,
    container,
    pod,
    release_values,
    rendered,
    wait_until,
)

RELEASE = "life"
NAMESPACE = "life-system"
VICTIM = "life-victim"
NAME = f"{RELEASE}-quickq-guard"
DEAD = "https://127.0.0.1:1"  # nothing listens: every call fails at once
KINDS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
FAILED_CALL = "failed calling webhook"


def chart_flags(url: str, ca_bundle: str, **extra: Any) -> list[str]:
    """The harness's values, with the chart's own defaults for what this module tests."""
    return [*release_values(url, ca_bundle, **{
        "crd.install": "false", "webhook.failSafe.enabled": "true", "cleanup.enabled": "true",
        "webhook.failSafe.probeNamespace": VICTIM, "config.excludeUsers": ["ci-*"], **extra})]


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> ControlPlane:
    for name in (VICTIM, NAMESPACE, "calico-system", "opted-out"):
        plane.namespace(name)
    plane.kubectl("label", "namespace", "opted-out", "quickq.io/ignore=true", "--overwrite")
    plane.service_account("kube-system")
    # Two users who may create Pods in the victim namespace: ci-deployer is excluded. (The
    # aggregated `edit` role is empty here: no controller-manager fills it.)
    plane.kubectl("create", "role", "pod-writer", "-n", VICTIM, "--verb=create",
                  "--resource=pods")
    for user in ("ci-deployer", "alice"):
        plane.kubectl("create", "rolebinding", f"{user}-pods", "-n", VICTIM,
                      "--role=pod-writer", f"--user={user}")
    return plane


def create(kube: ControlPlane, namespace: str, name: str, *as_user: str,
           image: str = "registry.example.com/web:1.0") -> str:
    """stderr of a server-side dry-run create of a Pod ('' when admitted)."""
    obj = pod(name, namespace, container(image=image),
              securityContext={"runAsNonRoot": True, "runAsUser": 1000})
    done = kube.kubectl("create", "--dry-run=server", "-f", "-", *as_user,
                        input=json.dumps(obj), check=False)
    return "" if done.returncode == 0 else done.stderr


def policies(kube: ControlPlane) -> tuple[str, str]:
    found = []
    for kind in KINDS:
        config = json.loads(kube.kubectl("get", kind, NAME, "-o", "json").stdout)
        # One policy per configuration: `cluster arm` sets every webhook of it (the
        # validating configuration's namespaces webhook too), but the ConfigMaps' entry,
        # which is Ignore always (test_config_maps.py).
        [policy] = {hook["failurePolicy"] for hook in config["webhooks"]
                    if not hook["name"].startswith("configmaps.")}
        found.append(policy)
    return found[0], found[1]


def armed(kube: ControlPlane) -> list[str]:
    return [json.loads(kube.kubectl("get", kind, NAME, "-o", "json").stdout)["metadata"]
            .get("annotations", {}).get("quickq.io/failure-policy-armed", "") for kind in KINDS]


def hook_account(kube: ControlPlane, flags: list[str], workdir: Path) -> Path:
    """The hooks' ServiceAccount and RBAC as the chart renders them, and a token file."""
    documents = rendered(kube, RELEASE, NAMESPACE, flags)
    for doc in documents:
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                           "RoleBinding") and doc["metadata"]["name"].endswith(("-hooks",
                                                                                  "-probe")):
            kube.apply(doc, check=True)
    token = kube.kubectl("create", "token", f"{NAME}-hooks", "-n", NAMESPACE).stdout.strip()
    path = workdir / "hooks-token"
    path.write_text(token)
    return path


def hook_command(kube: ControlPlane, flags: list[str], name: str) -> list[str]:
    """The `quickq-guard cluster ...` command of the chart's hook Job or test Pod `name`."""
    for doc in rendered(kube, RELEASE, NAMESPACE, flags):
        if doc["metadata"]["name"] == name:
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Job" else doc["spec"]
            args: list[str] = spec["containers"][0]["command"]
            return args
    raise AssertionError(f"the chart renders no {name}")


def instance_arg(kube: ControlPlane, flags: list[str]) -> str:
    """The chart's `--instance=` server argument: the webhook here runs as its pods do."""
    for doc in rendered(kube, RELEASE, NAMESPACE, flags):
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == NAME:
            args: list[str] = doc["spec"]["template"]["spec"]["containers"][0]["args"]
            [instance] = [arg for arg in args if arg.startswith("--instance=")]
            return instance
    raise AssertionError("the chart renders no Deployment")


def run_hook(kube: ControlPlane, command: list[str], token: Path,
             *extra: str) -> subprocess.CompletedProcess[str]:
    """Run a hook's command from here, as its Pod would, with the hooks' token."""
    assert command[:2] == ["quickq-guard", "cluster"]
    server = yaml.safe_load(kube.kubeconfig.read_text())["clusters"][0]["cluster"]
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *command[1:], *extra,
         "--server", server["server"], "--certificate-authority",
         server["certificate-authority"], "--token-file", str(token)],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False)


@pytest.fixture(scope="module")
def webhook_files(kube: ControlPlane, certs: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    workdir = tmp_path_factory.mktemp("lifecycle")
    bundle = base64.b64encode((certs / "ca.crt").read_bytes()).decode()
    policies_dir, _ = chart_runtime_files(
        rendered(kube, RELEASE, NAMESPACE, chart_flags(DEAD, bundle)), workdir / "files")
    yield workdir, policies_dir, bundle
    kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks", check=False)


def test_install_arm_upgrade_down_and_uninstall(kube: ControlPlane, certs: Path,
                                                webhook_files: tuple[Path, Path, str]) -> None:
    workdir, policies_dir, bundle = webhook_files
    flags = chart_flags(DEAD, bundle)

    # Installing: the pods have not answered (here: nothing listens). Both webhooks are
    # Ignore, so Pods are admitted in a judged namespace.
    kube.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks", *flags)
    try:
        lifecycle(kube, certs, workdir, policies_dir, bundle, flags)
    finally:
        kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks", check=False)


def lifecycle(kube: ControlPlane, certs: Path, workdir: Path, policies_dir: Path, bundle: str,
              flags: list[str]) -> None:
    config = workdir / "files" / "config.yaml"
    assert policies(kube) == ("Ignore", "Ignore")
    wait_until(lambda: create(kube, VICTIM, "early") == "",
               what="Pods admitted while no webhook answers")  # under Fail: refused

    # The arm hook that never sees an answer gives up and changes nothing.
    token = hook_account(kube, flags, workdir)
    arm = hook_command(kube, flags, f"{NAME}-arm")
    assert arm[2:5] == ["arm", "--namespace", VICTIM]
    gave_up = run_hook(kube, arm, token, "--timeout", "4")
    assert gave_up.returncode == 1, gave_up.stderr
    assert "no answer within 4s" in gave_up.stderr
    assert "admitted, no answer" in gave_up.stderr  # the call failed open, silently
    assert policies(kube) == ("Ignore", "Ignore")

    webhook = Webhook(workdir, certs, "--policies", str(policies_dir), "--config", str(config),
                      instance_arg(kube, flags))
    try:
        flags = chart_flags(webhook.url, bundle)
        kube.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks", *flags)
        assert policies(kube) == ("Ignore", "Ignore"), "not armed yet: still Ignore"
        # Ready: the arm hook sees both webhooks answer and switches each policy.
        done = run_hook(kube, hook_command(kube, flags, f"{NAME}-arm"), token)
        assert done.returncode == 0, done.stderr
        assert policies(kube) == ("Fail", "Ignore")
        assert armed(kube) == ["true", "true"]
        assert "[disallow-latest-tag]" in create(kube, VICTIM, "latest", image="nginx:latest")
        assert create(kube, VICTIM, "good") == ""

        # helm test: its probe is denied by disallow-latest-tag.
        test = run_hook(kube, hook_command(kube, flags, f"{NAME}-test"), token)
        assert test.returncode == 0, test.stdout + test.stderr
        assert "[disallow-latest-tag]" in test.stdout

        # An upgrade renders the armed policy at once (no Ignore window).
        kube.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks", *flags,
                  "--set", "webhook.timeoutSeconds=4")
        assert policies(kube) == ("Fail", "Ignore")
    finally:
        webhook.stop()

    # All replicas down: judged namespaces refuse Pods; what is never judged is admitted.
    wait_until(lambda: FAILED_CALL in create(kube, VICTIM, "down"),
               what="the down webhook to refuse Pods")
    assert FAILED_CALL in create(kube, VICTIM, "alice", "--as=alice")
    assert create(kube, VICTIM, "ci", "--as=ci-deployer") == ""  # excludeUsers: ci-*
    for namespace in ("kube-system", "calico-system", "opted-out", NAMESPACE):
        assert create(kube, namespace, "system") == "", namespace

    # Uninstall: the pre-delete hook deletes both configurations first.
    cleanup = run_hook(kube, hook_command(kube, flags, f"{NAME}-cleanup"), token)
    assert cleanup.returncode == 0, cleanup.stderr
    for kind in KINDS:
        assert "NotFound" in kube.kubectl("get", kind, NAME, check=False).stderr
    kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks")
    wait_until(lambda: create(kube, VICTIM, "after") == "",
               what="Pods admitted again after uninstall")


def test_kubectl_debug_adds_only_what_the_policies_admit(
        kube: ControlPlane, certs: Path, webhook_files: tuple[Path, Path, str]) -> None:
    """pods/ephemeralcontainers is intercepted: `kubectl debug` with a :latest image is
    denied naming the debug container; a pinned, restricted one is added."""
    workdir, policies_dir, bundle = webhook_files
    config = workdir / "files" / "config.yaml"
    webhook = Webhook(workdir, certs, "--policies", str(policies_dir), "--config", str(config))
    try:
        kube.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks",
                  *chart_flags(webhook.url, bundle, **{"webhook.failSafe.enabled": "false"}))
        # Another release's webhooks (the session's) may judge this namespace too: the
        # denial below must be this release's, and both come from the same policies.
        target = pod("debugged", VICTIM, container(),
                     securityContext={"runAsNonRoot": True, "runAsUser": 1000})
        wait_until(lambda: kube.apply(target).returncode == 0, what="the Pod to be created")
        denied = kube.kubectl("debug", "debugged", "-n", VICTIM, "--image=busybox:latest",
                              "--profile=sysadmin", "--container=debugger", check=False)
        assert denied.returncode != 0
        assert 'admission webhook "validate.quickq-guard.quickq.io" denied' in denied.stderr
        assert "[disallow-latest-tag] ephemeralContainer 'debugger'" in denied.stderr
        admitted = kube.kubectl("debug", "debugged", "-n", VICTIM, "--image=busybox:1.37",
                                "--profile=restricted", "--container=pinned", check=False)
        assert admitted.returncode == 0, admitted.stderr
        stored = kube.get("pod", "debugged", VICTIM)["spec"]["ephemeralContainers"]
        assert [c["name"] for c in stored] == ["pinned"]
        reviewed = [line for line in webhook.logs()
                    if line.get("subResource") == "ephemeralcontainers"]
        assert {line["decision"] for line in reviewed} == {"denied", "allowed"}
    finally:
        kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks", check=False)
        webhook.stop()
