"""mTLS that keeps the pod alive: with clientCA.enabled, /validate and /mutate need a client
certificate, while the kubelet's probes and the ServiceMonitor, which hold none, reach
/healthz, /readyz and /metrics on the probe port (TLS, no client certificate asked), which
serves nothing else. Checked on the rendered chart, then against a real server started with
the rendered arguments and probed as the rendered probes and ServiceMonitor say."""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path
from typing import Any

import httpx
import pytest
from chart_helpers import FULLNAME, find, helm_template

from webhook.server.certs import ensure_certs, load_ca
from webhook.testing import NAMESPACE, SERVICE, Server, client_cert, free_port
from webhook.testing import admission_review as review
from webhook.testing import review_pod as pod

VALUES = {"clientCA": {"enabled": True, "secretName": "apiserver-client-ca"},
          "serviceMonitor": {"enabled": True}, "networkPolicy": {"enabled": True}}
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["containers"]
    return container


def _container_port(container: dict[str, Any], name: str) -> int:
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
    return int(port)


def test_client_ca_moves_probes_metrics_and_policy_to_the_probe_port() -> None:
    docs = helm_template(VALUES)
    container = _container(docs)
    assert "--probe-port=8444" in container["args"]
    assert _container_port(container, "probes") == 8444
    for probe in PROBES:
        assert container[probe]["httpGet"]["port"] == "probes"
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"
    ports = find(docs, "Service", FULLNAME)["spec"]["ports"]
    assert {"name": "probes", "port": 8444, "targetPort": "probes", "protocol": "TCP"} in ports
    (endpoint,) = find(docs, "ServiceMonitor", FULLNAME)["spec"]["endpoints"]
    assert endpoint["port"] == "probes"
    (rule,) = find(docs, "NetworkPolicy", FULLNAME)["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {8443, 8444}


def test_without_client_ca_everything_stays_on_the_https_port() -> None:
    docs = helm_template({"serviceMonitor": {"enabled": True}})
    container = _container(docs)
    assert not any(a.startswith("--probe-port") for a in container["args"])
    assert [p["name"] for p in container["ports"]] == ["https"]
    for probe in PROBES:
        assert container[probe]["httpGet"]["port"] == "https"
    assert [p["name"] for p in find(docs, "Service", FULLNAME)["spec"]["ports"]] == ["https"]
    (endpoint,) = find(docs, "ServiceMonitor", FULLNAME)["spec"]["endpoints"]
    assert endpoint["port"] == "https"


def test_probe_port_equal_to_port_is_refused() -> None:
    from chart_helpers import helm_template_raw

    proc = helm_template_raw({**VALUES, "server": {"probePort": 8443}})
    assert proc.returncode != 0 and "server.probePort (8443) must differ" in proc.stderr


def _local_args(args: list[str], certs: Path, ports: dict[int, int]) -> list[str]:
    """The rendered arguments for a loopback run: files from `certs`, ports from `ports`,
    the shipped policies and config (the chart's ConfigMaps hold the same)."""
    files = {"/etc/quickq-guard/tls/tls.crt": certs / "tls.crt",
             "/etc/quickq-guard/tls/tls.key": certs / "tls.key",
             "/etc/quickq-guard/client-ca/ca.crt": certs / "ca.crt"}
    local: list[str] = []
    for arg in args:
        option, equals, value = arg.partition("=")
        if option in ("--policies", "--config", "--watch-claims", "--watch-exceptions"):
            continue  # no API server to watch here
        if not equals:
            local.append(arg)
            continue
        if value in files:
            value = str(files[value])
        elif option in ("--port", "--probe-port"):
            value = str(ports[int(value)])
        elif option == "--host":
            value = "127.0.0.1"
        local.append(f"{option}={value}")
    return local


def _kubelet_get(port: int, path: str, scheme: str) -> httpx.Response:
    """What the kubelet's httpGet probe sends: HTTPS without verifying, no client cert."""
    with httpx.Client(verify=False, timeout=5) as client:  # as the kubelet: no verification
        return client.get(f"{scheme.lower()}://127.0.0.1:{port}{path}")


def _refused_without_client_cert(port: int, certs: Path) -> bool:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            return tls.recv(65536) == b""  # TLS 1.3: the alert arrives on the first read
    except (ssl.SSLError, ConnectionError):
        return True


@pytest.mark.parametrize("workers", [1, 2])
def test_rendered_probes_and_scrape_reach_the_server_and_validate_needs_a_cert(
        tmp_path: Path, workers: int) -> None:
    certs = tmp_path / "certs"
    ensure_certs(certs, SERVICE, NAMESPACE, days=2)
    ca = load_ca(certs / "ca.crt", certs / "ca.key")
    assert ca is not None
    cert, key = client_cert(ca, tmp_path)
    docs = helm_template({**VALUES, "clientCA": {**VALUES["clientCA"], "key": "ca.crt"},
                          "server": {"workers": workers}})
    container = _container(docs)
    https, probes = _container_port(container, "https"), _container_port(container, "probes")
    ports = {https: free_port(), probes: free_port()}
    server = Server(tmp_path, certs, *_local_args(container["args"], certs, ports),
                    port=ports[https], workers=workers, client_cert=(Path(cert), Path(key)))
    try:
        for probe in PROBES:  # as the kubelet sends them
            get = container[probe]["httpGet"]
            port = ports[_container_port(container, get["port"])]
            answer = _kubelet_get(port, get["path"], get["scheme"])
            assert answer.status_code == 200, (probe, answer.text)
        # The ServiceMonitor: Service port by name, its targetPort, verified as configured.
        (endpoint,) = find(docs, "ServiceMonitor", FULLNAME)["spec"]["endpoints"]
        (service_port,) = [p for p in find(docs, "Service", FULLNAME)["spec"]["ports"]
                           if p["name"] == endpoint["port"]]
        scrape_port = ports[_container_port(container, service_port["targetPort"])]
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        # serverName is the Service DNS name: connect to loopback and check that name.
        raw = socket.create_connection(("127.0.0.1", scrape_port), timeout=5)
        with context.wrap_socket(raw, server_hostname=endpoint["tlsConfig"]["serverName"]) \
                as tls:
            tls.sendall(f"GET {endpoint['path']} HTTP/1.1\r\nHost: x\r\n"
                        "Connection: close\r\n\r\n".encode())
            scraped_bytes = b""
            while chunk := tls.recv(65536):
                scraped_bytes += chunk
        assert scraped_bytes.startswith(b"HTTP/1.1 200"), scraped_bytes[:200]
        assert b"quickq_guard_" in scraped_bytes
        # The probe port serves no review, with or without a client certificate.
        body = json.dumps(review(pod())).encode()
        with httpx.Client(verify=False, timeout=5) as other:
            for path in ("/validate", "/mutate"):
                answer = other.post(f"https://127.0.0.1:{ports[probes]}{path}", content=body,
                                    headers={"content-type": "application/json"})
                assert answer.status_code == 404, path
        # The review port: refused without a client certificate, served with one.
        assert _refused_without_client_cert(ports[https], certs)
        with server.client() as api_server:
            answer = api_server.post("/validate", content=body,
                                     headers={"content-type": "application/json"})
            assert answer.status_code == 200 and answer.json()["response"]["allowed"] is True
    finally:
        assert server.stop() == 0
