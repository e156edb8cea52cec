"""Input that is not an AdmissionReview gets a 400 (or 413) naming the problem, never a 500."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import Server, pod, posted, review
from starlette.applications import Starlette

from webhook.server.app import MAX_BODY


def _without(field: str) -> dict[str, Any]:
    body = review(pod())
    del body["request"][field]
    return body


def _with(field: str, value: Any) -> dict[str, Any]:
    body = review(pod())
    body["request"][field] = value
    return body


JSON_CASES = [
    ([1, 2], "got a JSON array"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {}},
     "kind must be AdmissionReview"),
    ({**review(pod()), "apiVersion": "admission.k8s.io/v2"}, "apiVersion must be one of"),
    ({**review(pod()), "apiVersion": None}, "apiVersion must be one of"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"},
     "request is a string"),
    (_without("uid"), "request.uid must be a non-empty string"),
    (_with("uid", ""), "request.uid must be a non-empty string"),
    (_with("uid", 42), "request.uid must be a non-empty string"),
    (_without("operation"), "request.operation must be a string"),
    (_with("namespace", ["a"]), "request.namespace must be a string"),
    (_with("object", None), "request.object must be an object on CREATE"),
    (_with("object", "pod"), "request.object must be an object on CREATE"),
]


@pytest.mark.parametrize(("body", "problem"), JSON_CASES)
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_malformed_review(client: httpx.Client, path: str, body: Any, problem: str) -> None:
    answer = client.post(path, json=body)
    assert answer.status_code == 400
    assert problem in answer.json()["error"]


@pytest.mark.parametrize(("content", "headers", "problem"), [
    (b"{not json", {"content-type": "application/json"}, "body is not JSON"),
    (b"", {"content-type": "application/json"}, "empty body"),
    (b"\xff\xfe{}", {"content-type": "application/json"}, "body is not"),
    (b"[" * 100_000, {"content-type": "application/json"}, "body is not JSON"),
    (json.dumps(review(pod())).encode(), {"content-type": "text/plain"},
     "Content-Type must be application/json, got text/plain"),
    (json.dumps(review(pod())).encode(), {}, "Content-Type must be application/json"),
])
def test_malformed_body(client: httpx.Client, content: bytes, headers: dict[str, str],
                        problem: str) -> None:
    answer = client.post("/validate", content=content, headers=headers)
    assert answer.status_code == 400
    assert problem in answer.json()["error"]


def test_charset_parameter_is_accepted(client: httpx.Client) -> None:
    answer = client.post("/validate", content=json.dumps(review(pod())),
                         headers={"content-type": "application/json; charset=utf-8"})
    assert answer.status_code == 200


def test_wrong_method_and_path(client: httpx.Client) -> None:
    assert client.get("/validate").status_code == 405
    assert client.post("/nope", json={}).status_code == 404


def _padded(size: int) -> bytes:
    body = review(pod())
    body["request"]["object"]["metadata"]["annotations"] = {"pad": ""}
    base = len(json.dumps(body).encode())
    body["request"]["object"]["metadata"]["annotations"]["pad"] = "x" * (size - base)
    data = json.dumps(body).encode()
    assert len(data) == size
    return data


def test_body_at_the_limit_is_judged(client: httpx.Client) -> None:
    answer = client.post("/validate", content=_padded(MAX_BODY),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True


def test_body_over_the_limit_by_content_length(client: httpx.Client) -> None:
    answer = client.post("/validate", content=_padded(MAX_BODY + 1),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 413
    assert "exceeds the limit" in answer.json()["error"]
    assert client.get("/healthz").status_code == 200


def test_body_over_the_limit_while_streaming(client: httpx.Client) -> None:
    data = _padded(MAX_BODY + 1)

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for start in range(0, len(data), 65536):
            yield data[start:start + 65536]

    answer = client.post("/validate", content=chunks(),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 413
    assert "exceeds the limit" in answer.json()["error"]


def test_huge_declared_length_is_refused_before_reading(server: Server) -> None:
    """The server answers from the header alone; it does not wait for 1 GiB to arrive."""
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    with server.context().wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n{")
        answer = tls.recv(65536)
    assert answer.startswith(b"HTTP/1.1 413")


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # TLS 1.0/1.1, on purpose
def test_tls_checks_the_service_name_and_version(server: Server) -> None:
    context = server.context()
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    with context.wrap_socket(raw, server_hostname="quickq-guard.quickq-guard.svc") as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
    with pytest.raises(ssl.SSLCertVerificationError), socket.create_connection(
            ("127.0.0.1", server.port), timeout=5) as raw, context.wrap_socket(
            raw, server_hostname="other.default.svc"):
        pass
    old = server.context()
    old.minimum_version = ssl.TLSVersion.TLSv1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    old.set_ciphers("ALL:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError), socket.create_connection(
            ("127.0.0.1", server.port), timeout=5) as raw, old.wrap_socket(
            raw, server_hostname="localhost"):
        pass


# In process: any JSON in any request field gets a 200 or a 400, never a 500.

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=12)
FIELDS = ["uid", "operation", "namespace", "name", "kind", "userInfo", "object", "oldObject",
          "dryRun"]
POD_FIELDS = ["metadata", "spec", "kind", "apiVersion"]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), pod_field=st.sampled_from(POD_FIELDS), value=JSON,
       path=st.sampled_from(["/validate", "/mutate"]), in_pod=st.booleans())
def test_any_json_gets_200_or_400(app: Starlette, field: str, pod_field: str,
                                  value: Any, path: str, in_pod: bool) -> None:
    body = review(pod())
    if in_pod:
        body["request"]["object"][pod_field] = value
    else:
        body["request"][field] = value
    [answer] = posted(app, path, body)
    assert answer.status_code in (200, 400), answer.text
    if answer.status_code == 200:
        assert answer.json()["response"]["uid"] == body["request"]["uid"]

