"""The serving port speaks TLS 1.2+ with forward-secret AEAD suites only, never plain HTTP,
and with --client-ca only to clients holding a certificate from that CA."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import httpx
import pytest
from server_helpers import Server, client_cert, pod, post, review

from webhook.server.certs import create_ca, load_ca


def _tls12(server: Server, ciphers: str) -> ssl.SSLContext:
    context = server.context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    return context


def _handshake(server: Server, context: ssl.SSLContext) -> tuple[str, str]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as tls:
        cipher = tls.cipher()
        assert cipher is not None
        return str(tls.version()), cipher[0]


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-GCM-SHA256",
                                    "ECDHE-ECDSA-AES256-GCM-SHA384",
                                    "ECDHE-ECDSA-CHACHA20-POLY1305"])
def test_tls12_modern_suites_are_accepted(server: Server, cipher: str) -> None:
    assert _handshake(server, _tls12(server, cipher)) == ("TLSv1.2", cipher)


@pytest.mark.parametrize("cipher", ["ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA384",
                                    "ECDHE-ECDSA-AES128-SHA256", "AES128-GCM-SHA256",
                                    "AES256-SHA", "DHE-RSA-AES128-GCM-SHA256"])
def test_tls12_cbc_and_non_forward_secret_suites_are_refused(server: Server,
                                                              cipher: str) -> None:
    try:
        context = _tls12(server, f"{cipher}:@SECLEVEL=0")
    except ssl.SSLError:
        pytest.skip(f"this OpenSSL cannot offer {cipher}")
    with pytest.raises(ssl.SSLError):
        _handshake(server, context)


def test_tls13_is_offered(server: Server) -> None:
    version, cipher = _handshake(server, server.context())
    assert version == "TLSv1.3" and cipher.startswith("TLS_")


def test_plain_http_on_the_serving_port_gets_no_admission_answer(server: Server) -> None:
    request = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
               b"\r\nContent-Length: 2\r\n\r\n{}")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(request)
        received = b""
        try:
            while chunk := raw.recv(65536):
                received += chunk
        except (ConnectionError, TimeoutError):
            pass
    assert not received.startswith(b"HTTP/"), received[:200]
    assert b"AdmissionReview" not in received and b"error" not in received
    with server.client() as client:
        assert client.get("/healthz").status_code == 200


def test_client_ca_refuses_certificates_of_another_ca_and_none(tmp_path: Path,
                                                              certs_dir: Path) -> None:
    """With --client-ca, only a certificate from that CA gets through the TLS handshake: no
    certificate, or one from another CA (however well-formed), is refused before HTTP."""
    client_ca = load_ca(certs_dir / "ca.crt", certs_dir / "ca.key")
    assert client_ca is not None
    good = client_cert(client_ca, tmp_path, "good")
    other = client_cert(create_ca(), tmp_path, "other")

    def context(pair: tuple[str, str] | None) -> ssl.SSLContext:
        made = ssl.create_default_context(cafile=str(certs_dir / "ca.crt"))
        if pair:
            made.load_cert_chain(*pair)
        return made

    class WithClientCert(Server):
        def context(self) -> ssl.SSLContext:
            return context(good)

    server = WithClientCert(tmp_path, certs_dir, "--client-ca", str(certs_dir / "ca.crt"))
    try:
        with server.client() as client:
            assert post(client, "/validate", review(pod()))["allowed"] is True
        for pair in (None, other):
            with pytest.raises(httpx.TransportError), httpx.Client(
                    base_url=f"https://localhost:{server.port}", verify=context(pair)) as client:
                client.post("/validate", json=review(pod()))
    finally:
        assert server.stop() == 0
