"""certs.helm.rotation on a real API server, under load: the chart's own certificates (helm
mode), the caBundle it injects, and a webhook that gets the new Secret only later, as pods do
(the kubelet refreshes a mounted Secret up to a minute after it changed). Not one request
fails, and the same rotation value again rotates nothing.

The chart's certificate names its Service; here the Service is called `localhost`
(fullnameOverride) and the webhook is registered by URL at https://localhost:<port>, so the
API server checks the chart's own certificate against the chart's own caBundle."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_helpers import (
    CHART,
    ApiClient,
    ControlPlane,
    Webhook,
    chart_runtime_files,
    container,
    pod,
    rendered,
    wait_until,
)
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

RELEASE = "rot"
NAMESPACE = "rot-system"
VICTIM = "rot-victim"
NAME = "localhost"  # the Service name, so the certificate names the host the URL has
SECRET = f"{NAME}-tls"


def flags(port: int, *more: str) -> list[str]:
    return ["--set", f"fullnameOverride={NAME}", "--set", f"webhook.url=https://localhost:{port}",
            "--set", "webhook.failSafe.enabled=false", "--set", "cleanup.enabled=false",
            # Both Fail: a call that fails TLS is a refused request, never a silent pass.
            "--set", "webhook.failurePolicy.mutating=Fail", *more]


def free_port() -> int:
    """A loopback port for the webhook: its URL goes into the chart before it starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def secret_files(kube: ControlPlane, out: Path) -> None:
    """The chart's Secret as the kubelet would write it into the pod (one file at a time,
    each replaced whole)."""
    data = kube.get("secret", SECRET, NAMESPACE)["data"]
    out.mkdir(parents=True, exist_ok=True)
    for key in ("ca.crt", "tls.key", "tls.crt"):
        part = out / f".{key}.new"
        part.write_bytes(base64.b64decode(data[key]))
        part.replace(out / key)


def ca_bundle(kube: ControlPlane) -> list[x509.Certificate]:
    config = json.loads(kube.kubectl("get", "validatingwebhookconfiguration", NAME,
                                     "-o", "json").stdout)
    return x509.load_pem_x509_certificates(
        base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]))


class Load:
    """Dry-run creates of an admissible Pod, one after another, until stopped."""

    def __init__(self, kube: ControlPlane) -> None:
        self.kube = kube
        self.answers: list[int] = []
        self.problems: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        client = ApiClient(self.kube)
        obj = pod("load", VICTIM, container(),
                  securityContext={"runAsNonRoot": True, "runAsUser": 1000})
        try:
            while not self.stop.is_set():
                status, body = client.create(obj, dry_run=True)
                self.answers.append(status)
                if status != 201:
                    self.problems.append(str(body.get("message"))[:300])
        finally:
            client.close()

    def failed_since(self, start: int) -> int:
        return sum(1 for status in self.answers[start:] if status != 201)


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> ControlPlane:
    plane.namespace(VICTIM)
    plane.namespace(NAMESPACE)
    return plane


@pytest.fixture(scope="module")
def installed(kube: ControlPlane,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Webhook, Path]]:
    workdir = tmp_path_factory.mktemp("rotation")
    port = free_port()
    policies, config = chart_runtime_files(rendered(kube, RELEASE, NAMESPACE, flags(port)),
                                           workdir / "files")
    kube.helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks", *flags(port))
    certs = workdir / "tls"
    secret_files(kube, certs)
    webhook = Webhook(workdir, certs, "--policies", str(policies), "--config", str(config),
                      port=port)
    try:
        yield webhook, certs
    finally:
        kube.helm("uninstall", RELEASE, "-n", NAMESPACE, "--no-hooks", check=False)
        webhook.stop()


def test_a_rotation_under_load_fails_no_request_and_does_not_stick(
        kube: ControlPlane, installed: tuple[Webhook, Path]) -> None:
    webhook, certs = installed
    load = Load(kube)
    load.thread.start()
    try:
        wait_until(lambda: len(load.answers) > 20 and load.answers[-1] == 201,
                   what="the webhook to admit Pods through the API server")
        start = len(load.answers)
        old_ca = ca_bundle(kube)
        old_serial = webhook.served_serial()
        kube.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks",
                  "--reuse-values", "--set", "certs.helm.rotation=2026-12-01")
        new_ca, kept = ca_bundle(kube)
        assert [kept] == old_ca and new_ca != kept
        # The API server trusts both; the webhook still serves the old leaf.
        wait_until(lambda: len(load.answers) - start > 10, what="creates with both CAs trusted")
        assert webhook.served_serial() == old_serial
        middle = len(load.answers)
        secret_files(kube, certs)  # the kubelet's refresh, a while later
        wait_until(lambda: webhook.served_serial() != old_serial, what="the new leaf to be served")
        wait_until(lambda: len(load.answers) - middle > 10, what="creates with the new leaf")
        end = len(load.answers)
        assert middle - start > 10 and end - middle > 10, (start, middle, end)
        assert load.failed_since(start) == 0, load.problems[:3]

        # --reuse-values passes the same rotation value again: nothing rotates.
        before = kube.get("secret", SECRET, NAMESPACE)["data"]
        kube.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks",
                  "--reuse-values", "--set", "webhook.timeoutSeconds=4")
        assert kube.get("secret", SECRET, NAMESPACE)["data"] == before
        assert ca_bundle(kube) == [new_ca, kept]

        # Control: a caBundle of the new CA alone (what swapping CA and leaf at once gives)
        # while the webhook still serves its leaf does fail requests; the load sees it.
        kube.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--no-hooks",
                  "--reuse-values", "--set", "certs.helm.rotation=2027-01-01")
        newest, previous = ca_bundle(kube)
        assert previous == new_ca
        only_new = base64.b64encode(newest.public_bytes(Encoding.PEM)).decode()
        control = len(load.answers)
        kube.kubectl("patch", "validatingwebhookconfiguration", NAME, "--type=json", "-p",
                     json.dumps([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle",
                                  "value": only_new}]))
        wait_until(lambda: load.failed_since(control) > 0,
                   what="requests to fail against a bundle without the served leaf's CA")
        assert any("x509" in problem or "certificate" in problem for problem in load.problems)
    finally:
        load.stop.set()
        load.thread.join()
