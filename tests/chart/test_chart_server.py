"""The chart's rendered Secret, ConfigMaps and container arguments drive the
real `quickq-guard serve`, laid out on disk the way the kubelet projects
them (timestamped dir + `..data` symlink swapped atomically on update).

This is the contract between chart and server without a cluster: the args
parse, the certificate verifies for the Service's DNS name, the config's
namespace exclusions apply, and a `helm upgrade` of the policies is picked up
by file-watch reload while the process keeps running."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from chart_helpers import FULLNAME, NAMESPACE, VENV_BIN, find, helm_template

from webhook.testing import wait_until

CLI = VENV_BIN / "quickq-guard"
ETC = "/etc/quickq-guard"


def project(directory: Path, files: Mapping[str, str | bytes]) -> None:
    """Write files the way the kubelet's atomic writer does, so updates swap `..data`."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / f"..{time.time_ns()}"
    stamp.mkdir()
    for name, content in files.items():
        target = stamp / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    link = directory / "..data_tmp"
    link.symlink_to(stamp.name)
    link.replace(directory / "..data")
    for name in files:
        entry = directory / name
        if not entry.is_symlink():
            entry.symlink_to(f"..data/{name}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A running `quickq-guard serve` started with the chart's arguments."""

    def __init__(self, root: Path, port: int, ca: Path, proc: subprocess.Popen[str]) -> None:
        self.root, self.port, self.ca, self.proc = root, port, ca, proc
        self.context = ssl.create_default_context(cafile=str(ca))
        self.hostname = f"{FULLNAME}.{NAMESPACE}.svc"

    def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """HTTPS to 127.0.0.1, verified against the chart's CA for the Service name."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as raw, \
                self.context.wrap_socket(raw, server_hostname=self.hostname) as tls:
            head = (f"{method} {path} HTTP/1.1\r\nHost: {self.hostname}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n").encode()
            tls.sendall(head + body)
            data = b""
            while chunk := tls.recv(65536):
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        _, _, payload = rest.partition(b"\r\n\r\n")
        return int(status_line.split()[1]), payload

    def review(self, endpoint: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace, "name": obj["metadata"]["name"], "operation": "CREATE",
            "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
            "object": obj, "oldObject": None, "dryRun": False}}
        status, payload = self.request("POST", f"/{endpoint}", json.dumps(review).encode())
        assert status == 200, payload
        response: dict[str, Any] = json.loads(payload)["response"]
        return response


def rendered_files(docs: list[dict[str, Any]]) -> dict[str, dict[str, str | bytes]]:
    """The mounted directories' contents, from the rendered Secret and ConfigMaps."""
    secret = find(docs, "Secret", f"{FULLNAME}-tls")["data"]
    return {
        "tls": {k: base64.b64decode(v) for k, v in secret.items()},
        "policies": dict(find(docs, "ConfigMap", f"{FULLNAME}-policies")["data"]),
        "config": dict(find(docs, "ConfigMap", f"{FULLNAME}-config")["data"]),
    }


def chart_args(docs: list[dict[str, Any]], root: Path, port: int) -> list[str]:
    """The container's args with in-container paths moved under `root`."""
    container = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"][0]
    assert container["ports"][0]["containerPort"] == 8443
    args = [a.replace(ETC, str(root)) for a in container["args"]]
    return [f"--port={port}" if a.startswith("--port=") else
            "--host=127.0.0.1" if a.startswith("--host=") else a for a in args]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"{CLI} is missing: pip install -e . into the venv", pytrace=False)
    docs = helm_template()
    root = tmp_path_factory.mktemp("etc-quickq-guard")
    for mount, files in rendered_files(docs).items():
        project(root / mount, files)
    port = free_port()
    log = (root / "server.log").open("w")
    proc = subprocess.Popen([str(CLI), "serve", *chart_args(docs, root, port)],
                            stdout=log, stderr=subprocess.STDOUT, text=True)
    srv = Server(root, port, root / "tls" / "ca.crt", proc)
    def ready() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"server exited {proc.returncode}:\n{(root / 'server.log').read_text()}")
        try:
            return srv.request("GET", "/readyz")[0] == 200
        except OSError:
            return False

    try:
        try:
            wait_until(ready, timeout=30, what="the server to be ready")
        except AssertionError as error:
            pytest.fail(f"{error}:\n{(root / 'server.log').read_text()}")
        yield srv
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def pod(name: str, requests: bool = True, gpu: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "50m", "memory": "32Mi"}} \
        if requests else {}
    container: dict[str, Any] = {
        "name": "main", "image": "registry.example.com/app:1.2.3", "resources": resources,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    if gpu:
        resources["limits"] = {"nvidia.com/gpu": "1"}
        resources["requests"]["nvidia.com/gpu"] = "1"
        container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": 8080},
                                      "periodSeconds": 10, "failureThreshold": 6}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "demo"}},
            "spec": {"containers": [container]}}


def test_health_endpoints_over_chart_tls(server: Server) -> None:
    assert server.request("GET", "/healthz")[0] == 200
    assert server.request("GET", "/readyz")[0] == 200
    status, body = server.request("GET", "/metrics")
    assert status == 200 and b"# TYPE" in body


def test_certificate_is_refused_for_other_names(server: Server) -> None:
    server.hostname = "quickq-guard.elsewhere.svc"
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            server.request("GET", "/healthz")
    finally:
        server.hostname = f"{FULLNAME}.{NAMESPACE}.svc"


def test_validate_denies_and_release_namespace_is_exempt(server: Server) -> None:
    denied = server.review("validate", pod("no-requests", requests=False), "team-a")
    assert denied["allowed"] is False
    assert "require-requests" in json.dumps(denied)
    exempt = server.review("validate", pod("no-requests", requests=False), NAMESPACE)
    assert exempt["allowed"] is True


def test_mutate_patches_gpu_pod(server: Server) -> None:
    answer = server.review("mutate", pod("gpu", gpu=True), "team-a")
    assert answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(answer["patch"]))
    paths = " ".join(op["path"] for op in patch)
    assert "startupProbe" in paths and "tolerations" in paths


def test_helm_upgrade_of_policies_reloads_without_restart(server: Server) -> None:
    """Render as after `helm upgrade --set policies.require-requests.action=off`."""
    upgraded = helm_template({"policies": {"require-requests": {"action": "off"}}})
    project(server.root / "config", rendered_files(upgraded)["config"])
    wait_until(lambda: server.review("validate", pod("no-requests", requests=False),
                                     "team-a")["allowed"] is True,
               what="the policy override to reload", interval=0.5)
    assert server.proc.poll() is None, "the server restarted instead of reloading"
