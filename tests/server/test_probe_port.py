"""`serve --probe-port`: /healthz, /readyz and /metrics without a client certificate beside a
`--client-ca` review port, with the serving certificate reloaded on both, and a probe port
that is taken or the review port itself refused before anything starts."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from pathlib import Path

import httpx
from server_helpers import NAMESPACE, SERVICE, Server, client_cert, file_serial, free_port

from webhook.server.certs import ensure_certs, load_ca
from webhook.testing import wait_until


def _probe_serial(port: int, certs: Path) -> int:
    from cryptography import x509

    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_the_probe_port_serves_the_renewed_certificate_too(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    ensure_certs(certs, SERVICE, NAMESPACE, days=2)
    ca = load_ca(certs / "ca.crt", certs / "ca.key")
    assert ca is not None
    cert, key = client_cert(ca, tmp_path)
    probe = free_port()
    server = Server(tmp_path, certs, "--probe-port", str(probe), client_ca=certs / "ca.crt",
                    client_cert=(Path(cert), Path(key)))
    try:
        first = _probe_serial(probe, certs)
        ensure_certs(certs, SERVICE, NAMESPACE, days=2)  # same CA, new serving certificate
        renewed = file_serial(certs / "tls.crt")
        assert renewed != first
        wait_until(lambda: _probe_serial(probe, certs) == renewed, 10, interval=0.05)
        wait_until(lambda: server.served_serial() == renewed, 10, interval=0.05)
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        with httpx.Client(verify=context, timeout=5) as kubelet:
            assert kubelet.get(f"https://localhost:{probe}/readyz").text == "ready"
    finally:
        assert server.stop() == 0


def test_a_probe_port_in_use_or_equal_to_the_port_stops_serve(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    ensure_certs(certs, SERVICE, NAMESPACE, days=2)
    files = ["--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key")]
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "webhook.cli", "serve", "--host",
                               "127.0.0.1", "--port", str(port), "--probe-port", str(busy),
                               *files], capture_output=True, text=True, timeout=60,
                              check=False)
    assert done.returncode == 3 and "pass --probe-port" in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "serve", "--host", "127.0.0.1",
                           "--port", str(port), "--probe-port", str(port), *files],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "--probe-port must differ from --port" in done.stderr
