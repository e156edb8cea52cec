"""A real `quickq-guard serve` in a subprocess, an HTTPS client that checks it as the API
server does (our CA only, the DNS name), and AdmissionReview builders."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509

SERVICE = "quickq-guard"
NAMESPACE = "quickq-guard"
SERVICE_DNS = f"{SERVICE}.{NAMESPACE}.svc"
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`quickq-guard serve` on a loopback port; stdout (the JSON log) goes to a file."""

    def __init__(self, workdir: Path, certs: Path | None, *extra: str, workers: int = 1) -> None:
        """`certs` None: run with the default --cert/--key, as a newcomer's first run does."""
        self.port = free_port()
        self.certs = certs or workdir / "certs"
        files = ["--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key")] \
            if certs else []
        self.log_path = workdir / f"server-{self.port}.log"
        self.err_path = workdir / f"server-{self.port}.err"
        command = [sys.executable, "-c", "import sys; from webhook.cli import main; "
                   "sys.exit(main())", "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), *files, "--workers", str(workers), *extra]
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        self.process = subprocess.Popen(
            command, cwd=workdir, env=env, stdout=self.log_path.open("wb"),
            stderr=self.err_path.open("wb"))
        self.wait_ready()

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certs / "ca.crt"))

    def tls(self, timeout: float = 10) -> ssl.SSLSocket:
        """A raw TLS connection to the server, checked as the API server checks it."""
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context().wrap_socket(raw, server_hostname="localhost")

    def served_serial(self) -> int:
        """The serial number of the certificate the server serves now."""
        with self.tls(timeout=5) as tls:
            der = tls.getpeercert(binary_form=True)
        assert der is not None
        return int(x509.load_der_x509_certificate(der).serial_number)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=f"https://localhost:{self.port}", verify=self.context(),
                            timeout=10, **kwargs)

    def wait_ready(self, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.errors()}")
            try:
                with self.client() as client:
                    if client.get("/readyz").status_code == 200:
                        return
            except (httpx.TransportError, OSError):  # OSError: no CA file written yet
                pass
            time.sleep(0.05)
        raise RuntimeError(f"server not ready: {self.errors()}")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def errors(self) -> str:
        return self.err_path.read_text() + self.log_path.read_text()


def pod(name: str = "web", **overrides: Any) -> dict[str, Any]:
    """A Pod that every shipped enforce policy accepts, as the API server sends it (defaulted
    probe fields included); the liveness probe is short enough for the warn policy."""
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"app": name}},
        "spec": {
            "securityContext": {"runAsNonRoot": True},
            "containers": [{
                "name": "web", "image": "nginx:1.27",
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                              "limits": {"memory": "256Mi"}},
            }],
        },
    }
    obj["spec"].update(overrides)
    return obj


def with_probe(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with a liveness probe of 30 s tolerance: the startup probe is injected and the
    warn policy liveness-probe-tolerance fires."""
    obj = copy.deepcopy(obj)
    obj["spec"]["containers"][0]["livenessProbe"] = {
        "httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
        "failureThreshold": 3, "timeoutSeconds": 1, "successThreshold": 1}
    return obj


def bad_pod() -> dict[str, Any]:
    obj = pod("bad")
    container = obj["spec"]["containers"][0]
    container["image"] = "nginx"
    container["env"] = [{"name": "DB_PASSWORD", "value": "hunter2-secret-value"}]
    del obj["spec"]["securityContext"]
    return obj


def review(obj: Any, *, operation: str = "CREATE", old: Any = None, namespace: str = "team-a",
           version: str = "admission.k8s.io/v1", username: str = "alice",
           dry_run: bool = False) -> dict[str, Any]:
    kind = obj.get("kind", "Pod") if isinstance(obj, dict) else "Pod"
    return {
        "apiVersion": version, "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "name": obj.get("metadata", {}).get("name", "") if isinstance(obj, dict) else "",
            "namespace": namespace, "operation": operation,
            "userInfo": {"username": username, "groups": ["system:authenticated"]},
            "object": obj, "oldObject": old, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
        },
    }


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """POST a review and check the parts of the answer the API server checks first."""
    answer = client.post(path, json=body)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    assert data["apiVersion"] == body["apiVersion"]
    assert data["kind"] == "AdmissionReview"
    assert data["response"]["uid"] == body["request"]["uid"]
    assert isinstance(data["response"]["allowed"], bool)
    response: dict[str, Any] = data["response"]
    return response


def client_cert(ca: tuple[Any, Any], out: Path, name: str = "client") -> tuple[str, str]:
    """A client certificate (CN kube-apiserver, clientAuth) signed by `ca` = (key, cert),
    written as `<name>.crt` / `<name>.key`; the paths."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1)).not_valid_after(now + dt.timedelta(1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256()))
    (out / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / f"{name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(out / f"{name}.crt"), str(out / f"{name}.key")


def file_serial(path: Path) -> int:
    """The serial number of a PEM certificate file."""
    return int(x509.load_pem_x509_certificate(path.read_bytes()).serial_number)


def metric(client: httpx.Client, prefix: str) -> float:
    """The sum of the /metrics samples whose line starts with `prefix`."""
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))

