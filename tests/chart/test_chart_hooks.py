"""The hook Jobs (arm after install/upgrade, cleanup before delete), the `helm test` Pod, and
the ServiceAccount they share: what each runs, and that they can do no more than that."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest
from chart_helpers import (
    CHART,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    find,
    helm_template,
    run,
    tool,
)

from webhook.cli.main import parser


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return helm_template()


def command(obj: dict[str, Any]) -> list[str]:
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    (container,) = spec["containers"]
    args: list[str] = container["command"]
    assert args[:2] == ["quickq-guard", "cluster"]
    parser().parse_args(args[1:])  # the CLI accepts what the chart writes
    return args[2:]


def hook_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["annotations"]["helm.sh/hook"])


def test_cleanup_runs_before_delete_and_removes_both_configurations(
        docs: list[dict[str, Any]]) -> None:
    job = find(docs, "Job", f"{FULLNAME}-cleanup")
    assert hook_of(job) == "pre-delete"
    assert command(job) == ["remove", "--validating", FULLNAME, "--mutating", FULLNAME]


@pytest.mark.parametrize(("values", "expect"), [
    ({}, "denied"),
    ({"mode": "dry-run"}, "warned"),
    ({"policies": {"disallow-latest-tag": {"action": "warn"}}}, "warned"),
    ({"policies": {"disallow-latest-tag": {"action": "audit"}}}, "answered"),
    ({"policies": {"disallow-latest-tag": {"action": "off"}}}, "answered"),
])
def test_helm_test_expects_what_the_settings_make_of_a_latest_image(
        values: dict[str, Any], expect: str) -> None:
    pod = find(helm_template(values), "Pod", f"{FULLNAME}-test")
    assert hook_of(pod) == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert command(pod) == [
        "probe", "--namespace", "default", "--instance", f"{NAMESPACE}/{FULLNAME}", "--image",
        "registry.invalid/quickq-guard-probe:latest", "--expect", expect,
        "--policy", "disallow-latest-tag"]


def test_hook_pods_are_not_the_webhooks_pods(docs: list[dict[str, Any]]) -> None:
    """Neither the Service nor the PodDisruptionBudget may count a hook's pod."""
    selector = find(docs, "Service")["spec"]["selector"]
    for obj in (find(docs, "Job", f"{FULLNAME}-arm"), find(docs, "Job", f"{FULLNAME}-cleanup"),
                find(docs, "Pod", f"{FULLNAME}-test")):
        labels = (obj["spec"]["template"]["metadata"]["labels"] if obj["kind"] == "Job"
                  else obj["metadata"]["labels"])
        assert not selector.items() <= labels.items(), obj["metadata"]["name"]
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
        assert spec["serviceAccountName"] == f"{FULLNAME}-hooks"
        assert spec["containers"][0]["securityContext"]["runAsNonRoot"] is True


def test_the_hooks_account_may_touch_only_this_releases_webhooks_and_probe(
        docs: list[dict[str, Any]]) -> None:
    role = find(docs, "ClusterRole", f"{FULLNAME}-hooks")
    assert role["rules"] == [{
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
        "resourceNames": [FULLNAME], "verbs": ["get", "patch", "delete"]}]
    probe = find(docs, "Role", f"{FULLNAME}-probe")
    assert probe["metadata"]["namespace"] == "default"
    assert probe["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        binding = [d for d in docs if d["kind"] == kind
                   and not d["metadata"]["name"].endswith("-claims-reader")
                   and not d["metadata"]["name"].startswith(f"{FULLNAME}-audit")]
        assert [b["subjects"] for b in binding] == [[{
            "kind": "ServiceAccount", "name": f"{FULLNAME}-hooks", "namespace": NAMESPACE}]]
    # They exist only while a hook runs.
    for obj in docs:
        if obj["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                           "RoleBinding") and obj["metadata"]["name"].endswith(("-hooks",
                                                                                  "-probe")):
            annotations = obj["metadata"]["annotations"]
            assert hook_of(obj) == "post-install,post-upgrade,pre-delete,test"
            assert annotations["helm.sh/hook-delete-policy"] == \
                "before-hook-creation,hook-succeeded"
            assert int(annotations["helm.sh/hook-weight"]) < 0


def test_the_webhook_server_has_no_token_the_hooks_could_use(docs: list[dict[str, Any]]) -> None:
    pod = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]
    # Its token (for the claims watch) is its own account's, never the hooks'.
    assert pod["serviceAccountName"] != f"{FULLNAME}-hooks"
    # The name its answers to a probe carry: the one the hooks wait for.
    assert f"--instance={NAMESPACE}/{FULLNAME}" in pod["containers"][0]["args"]
    assert pod["serviceAccountName"] == FULLNAME


def test_every_hook_can_be_switched_off() -> None:
    docs = helm_template({"webhook": {"failSafe": {"enabled": False}},
                          "cleanup": {"enabled": False}, "test": {"enabled": False},
                          "dra": {"watchClaims": False}, "audit": {"enabled": False}})
    assert not [d for d in docs if d["kind"] in ("Job", "Pod", "ClusterRole", "Role")
                or d["metadata"]["name"].endswith("-hooks")]


def notes(*sets: str) -> str:
    """NOTES.txt as `helm install` prints it (a client-side dry run needs no cluster)."""
    with tempfile.TemporaryDirectory() as home:
        proc = run([tool("helm"), "install", RELEASE, CHART, "-n", NAMESPACE,
                    "--dry-run=client",
                    *[arg for item in sets for arg in ("--set", item)]], env={"HOME": home})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:", 1)[1]


@pytest.mark.parametrize(("sets", "kinds"), [
    ((), "validatingwebhookconfiguration,mutatingwebhookconfiguration"),
    (("webhook.mutating=false",), "validatingwebhookconfiguration"),
    (("webhook.validating=false",), "mutatingwebhookconfiguration"),
])
def test_notes_delete_only_the_webhooks_that_exist(sets: tuple[str, ...], kinds: str) -> None:
    text = notes(*sets)
    assert f"kubectl delete {kinds} {FULLNAME}\n" in text
    assert ("helm test" in text) is ("webhook.validating=false" not in sets)


def test_notes_mention_the_arm_job_only_when_there_is_one() -> None:
    assert "job/quickq-guard-arm" in notes()
    assert "job/quickq-guard-arm" not in notes("webhook.failurePolicy.validating=Ignore")
    assert "job/quickq-guard-arm" not in notes("webhook.failSafe.enabled=false")
