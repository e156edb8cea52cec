"""The chart's lock-out promise, with the whole chart helm-installed the way a user installs
it (webhooks through its Service): while no webhook answers, kube-system and the release's
own namespace still admit Pods, other namespaces follow webhook.failurePolicy, and namespaces
are created as before (only a tenant's opt-out waits for the namespaces webhook).

No pod ever runs here (there are no nodes), so the Service has no endpoints; the API server
(--enable-aggregator-routing) resolves it through them and fails without dialing anything."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest
from cluster_helpers import CHART, ControlPlane, Guard, acting_as, pod, wait_until

RELEASE = "lockout"
RELEASE_NAMESPACE = "lockout-system"
VICTIM = "lockout-victim"
FAILED_CALL = "failed calling webhook"


@pytest.fixture(scope="module")
def kube(guard: Guard) -> ControlPlane:
    plane = guard.plane
    plane.namespace(VICTIM)
    plane.namespace(RELEASE_NAMESPACE)
    plane.service_account("kube-system")
    return plane


def create(kube: ControlPlane, namespace: str, name: str) -> str:
    """stderr of a server-side dry-run create of a Pod every policy accepts ('' when admitted)."""
    done = kube.kubectl("create", "--dry-run=server", "-f", "-",
                        input=json.dumps(pod(name, namespace)), check=False)
    return "" if done.returncode == 0 else done.stderr


def fail_open_count(kube: ControlPlane) -> float:
    """How often the API server admitted a request after a webhook call failed."""
    metrics = kube.kubectl("get", "--raw", "/metrics").stdout
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("apiserver_admission_webhook_fail_open_count{"))


@pytest.mark.parametrize("failure_policy", ["Fail", "Ignore"])
def test_an_unreachable_webhook_locks_out_only_what_failure_policy_says(
        kube: ControlPlane, failure_policy: str) -> None:
    # failSafe off and no hooks: the policies as if armed (test_chart_lifecycle.py covers
    # the arming; no kubelet runs a hook Job here).
    kube.helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--no-hooks",
              "--set", f"webhook.failurePolicy.validating={failure_policy}",
              "--set", f"webhook.failurePolicy.mutating={failure_policy}",
              "--set", "webhook.failSafe.enabled=false")
    try:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            config = json.loads(kube.kubectl("get", kind, f"{RELEASE}-quickq-guard",
                                             "-o", "json").stdout)
            for hook in config["webhooks"]:  # the validating one's namespaces webhook too
                assert hook["clientConfig"]["service"]["namespace"] == RELEASE_NAMESPACE
                # The ConfigMaps' entry is Ignore always (test_config_maps.py).
                assert hook["failurePolicy"] == (
                    "Ignore" if hook["name"].startswith("configmaps.") else failure_policy)
        if failure_policy == "Fail":
            wait_until(lambda: FAILED_CALL in create(kube, VICTIM, "victim"),
                       what="the unreachable webhook to refuse Pods")
            error = create(kube, VICTIM, "victim")
            assert f'Post "https://{RELEASE}-quickq-guard.{RELEASE_NAMESPACE}.svc:443/' \
                in error
            # Resolved through the Service's endpoints (none exist), never by dialing the
            # ClusterIP: `--enable-aggregator-routing` (1.36 reads EndpointSlices).
            assert f'no endpoints available for service "{RELEASE}-quickq-guard"' in error
        else:  # the API server calls the webhook, fails, and admits: it counts that
            before = fail_open_count(kube)
            wait_until(lambda: create(kube, VICTIM, "victim") == ""
                       and fail_open_count(kube) > before,
                       what="the unreachable webhook to be called and fail open")
        assert create(kube, "kube-system", "system") == ""
        assert create(kube, RELEASE_NAMESPACE, "own") == ""
        # The namespaces webhook is sent only an opt-out asked for from outside
        # optOutGroups: an admin's system namespace and a tenant's own never wait for it.
        tenant = acting_as(kube, "lockout-tenant", [
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}])
        for name, flags in (("kube-flannel", []), ("team-lockout", tenant)):
            done = kube.kubectl("create", "namespace", name, "--dry-run=server", *flags,
                                check=False)
            assert done.returncode == 0, done.stderr
        refused = kube.kubectl("create", "namespace", "rook-ceph", "--dry-run=server",
                               *tenant, check=False)
        assert refused.returncode == 1
        assert 'webhook "namespaces.quickq-guard.quickq.io"' in refused.stderr
    finally:
        kube.helm("uninstall", RELEASE, "-n", RELEASE_NAMESPACE, "--wait", "--no-hooks")
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        gone = kube.kubectl("get", kind, f"{RELEASE}-quickq-guard", check=False)
        assert "NotFound" in gone.stderr
    wait_until(lambda: create(kube, VICTIM, "victim") == "",
               what="Pods admitted again after helm uninstall")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def hold() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


def test_a_webhook_that_never_answers_fails_the_call_after_timeout_seconds(
        guard: Guard, kube: ControlPlane, silent_port: int) -> None:
    """webhook.timeoutSeconds reaches the API server: a hung webhook costs a create that
    long, then failurePolicy decides (Fail: refused), instead of hanging the client."""

    def times_out() -> bool:
        return "context deadline exceeded" in create(kube, VICTIM, "hung")

    with guard.pointed_at(f"https://127.0.0.1:{silent_port}", times_out,
                          **{"webhook.timeoutSeconds": "2"}):
        error = create(kube, VICTIM, "hung")
    # The validating webhook's failure refuses; the mutating one's (Ignore) admits silently.
    assert 'failed calling webhook "validate.quickq-guard.quickq.io"' in error
    assert "?timeout=2s" in error  # the chart's value, not the default of 10 s
    assert "context deadline exceeded" in error  # the API server gave up after it
