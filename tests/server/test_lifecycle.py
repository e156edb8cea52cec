"""A running server's life: dry-run, reloads of policies and certificates, SIGHUP, SIGTERM,
several workers, client certificates, and the first run without certificates."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from server_helpers import (
    NAMESPACE,
    REPO,
    SERVICE,
    Server,
    bad_pod,
    client_cert,
    file_serial,
    metric,
    pod,
    post,
    review,
    with_probe,
)

from webhook.server.certs import ensure_certs, load_ca
from webhook.testing import wait_until


def eventually(check: Callable[[], bool], timeout: float = 6.0) -> None:
    wait_until(check, timeout, interval=0.05)


def test_dry_run_denies_nothing_and_reports_everything(tmp_path: Path, certs_dir: Path) -> None:
    server = Server(tmp_path, certs_dir, "--mode", "dry-run")
    try:
        with server.client() as client:
            body = review(bad_pod())
            response = post(client, "/validate", body)
            assert response["allowed"] is True and "status" not in response
            warnings = " ".join(response["warnings"])
            assert "[disallow-root-user] would deny" in warnings
            assert "would deny" in response["auditAnnotations"]["no-plaintext-secrets"]
            mutated = post(client, "/mutate", review(with_probe(pod())))
            assert "patch" not in mutated and "patchType" not in mutated
            assert "[inject-startup-probe] would patch" in " ".join(mutated["warnings"])
            assert "would patch" in mutated["auditAnnotations"]["inject-startup-probe"]
            broken = pod()
            broken["spec"]["containers"] = "oops"
            response = post(client, "/validate", review(broken))
            assert response["allowed"] is True
            warnings = " ".join(response["warnings"])
            assert "cannot be judged: spec.containers: expected a list" in warnings
            assert metric(client, 'quickq_guard_reviews_total{decision="would-deny"') == 1
            assert metric(client, 'quickq_guard_reviews_total{decision="error"') == 1
            assert metric(client, 'quickq_guard_findings_total{mode="dry-run",'
                                  'policy="no-plaintext-secrets",verdict="would-deny"}') == 1
        line = next(x for x in server.logs() if x.get("uid") == body["request"]["uid"])
        assert line["decision"] == "would-deny" and line["mode"] == "dry-run"
    finally:
        assert server.stop() == 0


def test_certificate_rotation_while_requests_run(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    ensure_certs(certs, SERVICE, NAMESPACE, days=2)
    server = Server(tmp_path, certs)
    failures: list[str] = []
    done = 0
    stop = threading.Event()

    def hammer(fresh_connections: bool) -> None:
        nonlocal done
        client = server.client()
        while not stop.is_set():
            if fresh_connections:  # a new handshake for every request
                client.close()
                client = server.client()
            try:
                post(client, "/validate", review(pod()))
                done += 1
            except Exception as error:  # collected, reported below
                failures.append(repr(error))
        client.close()

    threads = [threading.Thread(target=hammer, args=(fresh,)) for fresh in (True, True, False)]
    for thread in threads:
        thread.start()
    try:
        first = server.served_serial()
        wait_until(lambda: done >= 3, what="requests under way")
        ensure_certs(certs, SERVICE, NAMESPACE, days=2)  # same CA, new serving certificate
        renewed = file_serial(certs / "tls.crt")
        assert renewed != first
        eventually(lambda: server.served_serial() == renewed)
        # A broken certificate is refused; the one in use stays.
        good_cert = (certs / "tls.crt").read_bytes()
        (certs / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nbroken\n")
        with server.client() as client:
            eventually(lambda: metric(
                client, 'quickq_guard_reload_failures_total{what="certificate"}') >= 1)
        assert server.served_serial() == renewed
        (certs / "tls.crt").write_bytes(good_cert)
        served = done
        wait_until(lambda: done >= served + 3, what="requests after the certificate is back")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        assert server.stop() == 0
    assert failures == []
    assert done > 20
    events = [line for line in server.logs() if line.get("what") == "certificate"]
    assert [e["event"] for e in events][:2] == ["reloaded", "reload-failed"]


def _configmap_volume(target: Path, source: Path, version: str) -> None:
    """Lay out `target` as the kubelet lays out a ConfigMap volume: files are symlinks into
    `..data`, itself a symlink to a timestamped directory, swapped by one rename."""
    data = target / f"..{version}"
    shutil.copytree(source, data)
    link = target / "..data_tmp"
    link.symlink_to(data.name)
    os.replace(link, target / "..data")
    for name in os.listdir(data):
        if not (target / name).is_symlink():
            (target / name).symlink_to(f"..data/{name}")


def test_policy_reload_from_a_configmap_volume(tmp_path: Path, certs_dir: Path) -> None:
    staged = tmp_path / "staged"
    shutil.copytree(REPO / "policies", staged)
    volume = tmp_path / "policies"
    volume.mkdir()
    _configmap_volume(volume, staged, "v1")
    unlabelled = pod()
    del unlabelled["metadata"]["labels"]
    server = Server(tmp_path, certs_dir, "--policies", str(volume))
    try:
        with server.client() as client:
            assert post(client, "/validate", review(unlabelled))["allowed"] is True
            labels = staged / "require-labels.yaml"
            labels.write_text(labels.read_text().replace("action: audit", "action: enforce"))
            _configmap_volume(volume, staged, "v2")
            eventually(lambda: not post(client, "/validate", review(unlabelled))["allowed"])
            # A broken policy file is rejected; the set in force stays.
            labels.write_text("id: require-labels\naction: [broken\n")
            _configmap_volume(volume, staged, "v3")
            eventually(lambda: metric(
                client, 'quickq_guard_reload_failures_total{what="policies"}') >= 1)
            assert post(client, "/validate", review(unlabelled))["allowed"] is False
            assert server.process.poll() is None
        failed = [x for x in server.logs() if x.get("event") == "reload-failed"]
        assert "require-labels.yaml" in failed[0]["problem"]
    finally:
        assert server.stop() == 0


def test_sighup_reloads_the_config_at_once(tmp_path: Path, certs_dir: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("mode: enforce\n")
    server = Server(tmp_path, certs_dir, "--config", str(config))
    try:
        with server.client() as client:
            assert post(client, "/validate", review(bad_pod()))["allowed"] is False
            config.write_text("mode: dry-run\n")
            server.signal(signal.SIGHUP)
            eventually(lambda: post(client, "/validate", review(bad_pod()))["allowed"],
                       timeout=1.5)
            config.write_text("mode: sometimes\n")  # invalid: rejected, dry-run stays
            server.signal(signal.SIGHUP)
            eventually(lambda: metric(
                client, 'quickq_guard_reload_failures_total{what="policies"}') >= 1,
                timeout=1.5)
            assert post(client, "/validate", review(bad_pod()))["allowed"] is True
    finally:
        assert server.stop() == 0


def _start_request(server: Server, body: bytes) -> ssl.SSLSocket:
    """Send the headers and half the body: a request in flight."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    tls = server.context().wrap_socket(raw, server_hostname="localhost")
    tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body[:len(body) // 2])
    return tls


def _finish_request(tls: ssl.SSLSocket, body: bytes) -> dict[str, object]:
    tls.sendall(body[len(body) // 2:])
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        chunk = tls.recv(65536)
        if not chunk:
            break
        answer += chunk
    tls.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    result: dict[str, object] = json.loads(payload)
    return result


def test_sigterm_finishes_requests_in_flight_and_exits_0(tmp_path: Path,
                                                         certs_dir: Path) -> None:
    server = Server(tmp_path, certs_dir)
    bodies = [review(bad_pod()) for _ in range(5)]
    encoded = [json.dumps(body).encode() for body in bodies]
    sockets = [_start_request(server, data) for data in encoded]
    # No fixed wait for the server to read their headers: it has once it answers a request
    # sent after them on another connection (one worker: one event loop, which handles
    # what is ready in turn).
    with server.client() as client:
        assert client.get("/healthz").status_code == 200
    server.signal(signal.SIGTERM)

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except OSError:
            return True
        return False

    wait_until(refused, timeout=10, what="the server to stop accepting", interval=0.05)
    assert server.process.poll() is None  # waiting for the requests in flight
    with pytest.raises(httpx.ConnectError), server.client() as client:
        client.get("/healthz")  # no longer accepting
    for tls, data, body in zip(sockets, encoded, bodies, strict=True):
        answer = _finish_request(tls, data)
        response = answer["response"]
        assert isinstance(response, dict)
        assert response["uid"] == body["request"]["uid"] and response["allowed"] is False
    assert server.process.wait(10) == 0


def test_workers_share_metrics_and_self_signed_makes_certificates(tmp_path: Path) -> None:
    server = Server(tmp_path, None, "--self-signed", workers=2)  # certs/ is created
    try:
        assert (tmp_path / "certs" / "ca.crt").is_file()
        assert "trust the CA" in server.err_path.read_text()
        for _ in range(12):
            with server.client() as client:  # a new connection: either worker may take it
                post(client, "/validate", review(pod()))
        server.signal(signal.SIGHUP)  # reloads in each worker, replaces none
        eventually(lambda: sum(line.get("event") == "reloaded" for line in server.logs()) >= 2)
        with server.client() as client:
            post(client, "/validate", review(pod()))
            assert metric(client, "quickq_guard_reviews_total") == 13
            assert metric(client, "quickq_guard_certificate_expiry_timestamp_seconds") > 0
        started = {line["message"] for line in server.logs()
                   if line["message"].startswith("Started server process")}
        assert len(started) == 2  # one line per worker, each naming its pid
    finally:
        assert server.stop() == 0


def test_client_ca_requires_a_client_certificate(tmp_path: Path, certs_dir: Path) -> None:
    ca = load_ca(certs_dir / "ca.crt", certs_dir / "ca.key")
    assert ca is not None
    cert, key = client_cert(ca, tmp_path)
    context = ssl.create_default_context(cafile=str(certs_dir / "ca.crt"))
    context.load_cert_chain(cert, key)
    class WithClientCert(Server):  # its clients (readiness check too) present the cert
        def context(self) -> ssl.SSLContext:
            return context

    server = WithClientCert(tmp_path, certs_dir, "--client-ca", str(certs_dir / "ca.crt"))
    try:
        with server.client() as client:
            assert post(client, "/validate", review(pod()))["allowed"] is True
        bare = ssl.create_default_context(cafile=str(certs_dir / "ca.crt"))
        with pytest.raises(httpx.TransportError), httpx.Client(
                base_url=f"https://localhost:{server.port}", verify=bare) as client:
            client.get("/healthz")
    finally:
        assert server.stop() == 0
