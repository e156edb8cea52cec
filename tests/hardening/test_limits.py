"""Input limits of the real server: deep nesting, huge arrays, big headers, slow clients.

Documented limits (docs/threat-model.md): body <= 3 MiB (413); JSON nesting <= 1023 levels
(400 beyond). Header size and slow clients are bounded outside the process (the API
server's client certificate with --client-ca, and the chart's NetworkPolicy): these tests
show that neither stops the server from answering everyone else.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from typing import Any

import httpx
import pytest
from server_helpers import Server, pod, post, review

from webhook.server import admission
from webhook.server.app import MAX_BODY

SLOW_SECONDS = 6  # how long the slow clients below hold their connections



def _raw(body: bytes) -> bytes:
    return body


def _with_value_at(path: tuple[str, ...], value_json: str) -> bytes:
    body = review(pod())
    node: Any = body["request"]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = "__PLACE__"
    return json.dumps(body).encode().replace(b'"__PLACE__"', value_json.encode())


def _nested(depth: int, kind: str) -> str:
    if kind == "list":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "{}" + "}" * depth


def _alive(client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200


WHERE = [("object", "spec", "x"), ("object", "spec", "containers"),
         ("object", "spec", "containers", 0, "livenessProbe"), ("oldObject",), ("userInfo",),
         ("object", "metadata", "labels")]


@pytest.mark.parametrize("where", WHERE, ids=lambda w: "/".join(map(str, w)))
@pytest.mark.parametrize("kind", ["list", "dict"])
@pytest.mark.parametrize("depth", [900, 1100, 200_000])
def test_deep_nesting_is_judged_or_refused_never_500(client: httpx.Client, where: Any,
                                                     kind: str, depth: int) -> None:
    """Up to the parser's depth limit the object is judged; beyond it a 400 with JSON."""
    body = _with_value_at(where, _nested(depth, kind))
    if len(body) > MAX_BODY:
        body = body[:MAX_BODY]  # still deep, still too deep to parse
    for path in ("/validate", "/mutate"):
        answer = client.post(path, content=body, headers={"content-type": "application/json"})
        assert answer.status_code in (200, 400), answer.text[:300]
        data = answer.json()
        if depth > 1100 - 77:  # the review itself adds a few levels above the value
            assert answer.status_code == 400 and "body is not JSON" in data["error"]
        if answer.status_code == 200:
            assert isinstance(data["response"]["allowed"], bool)
    _alive(client)


def test_recursion_error_of_the_stdlib_parser_is_a_400(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without orjson, json.loads raises RecursionError on deep input: still a 400."""
    monkeypatch.setattr(admission, "loads", json.loads)
    deep = b'{"a":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(admission.AdmissionError) as raised:
        admission.parse_review(deep)
    assert raised.value.status == 400


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_huge_array_of_containers_within_the_body_limit_is_answered(
        client: httpx.Client, path: str) -> None:
    """~15 000 containers (just under 3 MiB), each failing policies and needing a patch: the
    answer is a valid AdmissionReview under the API server's limits (how long it takes:
    benchmarks/hostile_load.py, "a review near the 3 MiB body limit")."""
    body = review(pod())
    base = body["request"]["object"]["spec"]["containers"][0]
    one = dict(base, image="nginx", livenessProbe={"httpGet": {"port": 80}})
    count = (MAX_BODY - 4096) // (len(json.dumps(dict(one, name="c00000"))) + 2)
    body["request"]["object"]["spec"]["containers"] = [
        dict(one, name=f"c{i:05d}") for i in range(count)]
    data = json.dumps(body).encode()
    assert MAX_BODY - 16384 < len(data) <= MAX_BODY
    answer = client.post(path, content=data, headers={"content-type": "application/json"},
                         timeout=30)
    assert answer.status_code == 200
    response = answer.json()["response"]
    assert response["uid"] == body["request"]["uid"]
    if path == "/validate":
        assert response["allowed"] is False
    else:
        assert response["patchType"] == "JSONPatch"
    _alive(client)


@pytest.mark.parametrize(("size", "status"), [(16 * 1024 + 1, 200), (64 * 1024, 200),
                                            (1024 * 1024, 431)])
def test_big_headers_get_an_answer_and_others_are_still_served(server: Server, size: int,
                                                               status: int) -> None:
    """Up to HEADERS_MAX (128 KiB) of headers are served; past it the answer is 431 and the
    connection is closed (httptools has no limit: 64 MiB of headers took +197 MiB)."""
    with server.client() as client:
        answer = client.post("/validate", json=review(pod()), headers={"x-pad": "a" * size})
        assert answer.status_code == status
        if status == 200:
            assert answer.json()["response"]["allowed"] is True
    with server.client() as client:
        _alive(client)


def test_many_headers_under_the_limit_are_fine(client: httpx.Client) -> None:
    headers = {f"x-h{i}": "v" * 50 for i in range(100)}
    assert post(client, "/validate", review(pod())) and client.post(
        "/validate", json=review(pod()), headers=headers).status_code == 200


def _read_response(sock: ssl.SSLSocket) -> bytes:
    """One whole HTTP response (Content-Length framed) from the socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 1 << 30)
    while len(rest) < length:  # no Content-Length: read until the server closes
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def test_slow_clients_do_not_stop_others_being_served(server: Server,
                                                        client: httpx.Client) -> None:
    """Three slowloris connections (silent; dripping headers; dripping the body) hold their
    connections while a normal client keeps getting answers, and a kept-alive connection
    that waits between two requests (as the API server's do) is answered both times."""
    body = json.dumps(review(pod())).encode()
    head = (b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    drips = {"silent": b"", "headers": head, "body": None}
    done = threading.Event()
    results: dict[str, bool] = {}

    def slow(name: str) -> None:
        with server.tls(timeout=SLOW_SECONDS + 10) as sock:
            drip = drips[name]
            if drip is None:  # headers at once, then the body a byte at a time
                sock.sendall(head)
                drip = body
            try:
                for byte in drip:
                    if done.wait(0.5):
                        break
                    sock.sendall(bytes([byte]))
            except (ConnectionError, ssl.SSLError):
                pass  # dropped by the header deadline (webhook/server/deadlines.py): fine
            done.wait(SLOW_SECONDS)
            results[name] = True

    def kept_alive() -> None:
        with server.tls(timeout=SLOW_SECONDS + 10) as sock:
            answers = []
            for pause in (0, SLOW_SECONDS):
                time.sleep(pause)
                sock.sendall(head + body)
                answers.append(_read_response(sock))
            results["kept-alive"] = all(a.startswith(b"HTTP/1.1 200") for a in answers)

    threads = [threading.Thread(target=slow, args=(name,)) for name in drips]
    threads.append(threading.Thread(target=kept_alive))
    for thread in threads:
        thread.start()
    served = 0
    started = time.monotonic()
    while time.monotonic() - started < SLOW_SECONDS:
        post(client, "/validate", review(pod()))
        served += 1
        time.sleep(0.2)
    done.set()
    for thread in threads:
        thread.join()
    assert results == {"silent": True, "headers": True, "body": True, "kept-alive": True}
    assert served >= SLOW_SECONDS * 3


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"POST /validate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_http_protocol_errors_get_a_400_and_a_closed_connection(server: Server,
                                                                request_bytes: bytes) -> None:
    with server.tls(timeout=10) as sock:
        sock.sendall(request_bytes)
        answer = _read_response(sock)
        assert sock.recv(1) == b""  # closed: nothing after the answer
    head = answer.partition(b"\r\n\r\n")[0]
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]


def test_two_workers_answer_kept_alive_requests(tmp_path: Any, certs_dir: Any) -> None:
    """With --workers 2 both workers start, and kept-alive requests on several connections
    are all answered."""
    server = Server(tmp_path, certs_dir, workers=2)
    try:
        answers = []
        for _ in range(4):
            with server.client() as client:
                answers += [post(client, "/validate", review(pod()))["allowed"]
                            for _ in range(10)]
    finally:
        assert server.stop() == 0
    started = [line for line in server.logs() if line.get("message", "").startswith(
        "Started server process")]
    assert answers == [True] * 40
    assert len(started) == 2
