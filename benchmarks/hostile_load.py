"""Hostile load: what an attacker's input costs `quickq-guard serve` and `check` (issue 19).

Loopback only, bounded in size and time. Each case prints what it measured: the time to an
answer, the worst /healthz latency while the review ran (a second client polling every
20 ms), the server's RSS before and after (peak for the CLI), and whether it was refused.

    .venv/bin/python benchmarks/hostile_load.py           # the sizes of the issue
    .venv/bin/python benchmarks/hostile_load.py --quick   # small sizes, for the smoke test
    .venv/bin/python benchmarks/hostile_load.py --json    # the figures as JSON
    .venv/bin/python benchmarks/hostile_load.py --only issue32   # the cases of issue 32

Cases (webhook): a Pod of many containers under `podSecurity: {enforce: restricted}`, and
one of 9,000 sysctls (pss-sysctls maps and filters them); a container-scope CEL policy
reading `podSpec.containers.exists_one(...)` on such a Pod; policies that map the
containers, join a 1 MB annotation to each container's name, and compare the containers
with themselves per container, on 6,000 containers; a review near the 3 MiB body limit;
distinct made-up kinds and operations (the size of /metrics after them); idle TLS
connections past --max-connections; 3,000 clients that stop before the end of the TLS
handshake, and 3,000 before the end of their headers; one sending 64 MiB of headers; 2, 12
and 256 reviews at the body limit at once (peak RSS); a messageExpression that tries to show
an env value (leaks found in every answer and the log). Issue 32: an env value
`"http://h/?" + "key" * n` at 300 KB and 2.8 MB, 2 and 256 connections stalling a 2 MB body
(the connections still held each second, /healthz meanwhile, a 140 KB review), and 1,000
reviews each with a unique 3 MB image (RSS before and after). Cases (CLI): a billion-laughs file,
a chain of anchors nested 20,000 levels deep, an alias bomb in a policy's params, and three
chained replace() on an annotation (refused at load), each under a 4 GiB address-space
limit.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402

from webhook.server.certs import ensure_certs  # noqa: E402
from webhook.testing import NAMESPACE, SERVICE, Server, with_probe  # noqa: E402
from webhook.testing import admission_review as review  # noqa: E402
from webhook.testing import review_pod as pod  # noqa: E402

SECRET = "Qm4-planted-bench-value-z8"


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """The process's RSS now (VmRSS) or its peak so far (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def connect(server: Server, timeout: float) -> httpx.Client:
    return httpx.Client(base_url=f"https://localhost:{server.port}", verify=server.context(),
                        timeout=timeout)


@contextlib.contextmanager
def healthz_poller(server: Server) -> Iterator[list[float]]:
    """Poll /healthz every 20 ms on its own connection; yields the latencies seen."""
    latencies: list[float] = []
    stop = threading.Event()

    def poll() -> None:
        with connect(server, 60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                with contextlib.suppress(httpx.HTTPError):
                    client.get("/healthz")
                latencies.append(time.perf_counter() - started)
                stop.wait(0.02)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    time.sleep(0.1)
    try:
        yield latencies
    finally:
        stop.set()
        thread.join(70)


def timed_review(server: Server, body: dict[str, Any], path: str = "/validate"
                 ) -> dict[str, Any]:
    """Send one review; the answer's status, time, /healthz worst latency and RSS."""
    data = json.dumps(body).encode()
    before = rss_mib(server.process.pid)
    with connect(server, 120) as client, healthz_poller(server) as latencies:
        started = time.perf_counter()
        answer = client.post(path, content=data, headers={"content-type": "application/json"})
        seconds = time.perf_counter() - started
    response = answer.json().get("response", {}) if answer.status_code == 200 else {}
    return {"status": answer.status_code, "allowed": response.get("allowed"),
            "answer_s": round(seconds, 3), "body_kib": round(len(data) / 1024),
            "healthz_worst_s": round(max(latencies, default=0.0), 3),
            "rss_before_mib": round(before, 1),
            "rss_after_mib": round(rss_mib(server.process.pid), 1),
            "rss_peak_mib": round(rss_mib(server.process.pid, "VmHWM"), 1)}


def many_containers(count: int, **fields: Any) -> dict[str, Any]:
    obj = with_probe(pod())
    base = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [dict(copy.deepcopy(base), name=f"c{i}", **fields)
                                 for i in range(count)]
    return obj


def filled_in(count: int) -> dict[str, Any]:
    """A Pod of `count` containers with the fields the API server fills in."""
    return many_containers(
        count, terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File", imagePullPolicy="IfNotPresent",
        securityContext={"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                         "capabilities": {"drop": ["ALL"]},
                         "seccompProfile": {"type": "RuntimeDefault"}})


def near_body_limit(mib: float) -> int:
    """How many filled-in containers make a review of about `mib` MiB."""
    per_container = (len(json.dumps(review(filled_in(200)))) -
                     len(json.dumps(review(filled_in(100))))) / 100
    return int(mib * 1024 * 1024 / per_container) - 10


def webhook_cases(work: Path, certs: Path, quick: bool) -> list[dict[str, Any]]:
    """Three servers: the shipped policies with podSecurity restricted; one container-scope
    CEL policy reading podSpec; the shipped policies plus a messageExpression showing env."""
    shipped = [(source.name, source.read_text()) for source in (REPO / "policies").glob("*.yaml")]
    folders = {name: work / name for name in ("pss", "unique", "plain", "runtime")}
    for name, folder in folders.items():
        folder.mkdir()
        for file, text in shipped if name in ("pss", "plain") else ():
            (folder / file).write_text(text)
    for number, expression in enumerate((
            "object.spec.containers.map(c, c.name).size() > 0",
            "object.spec.containers.all(c, (object.metadata.annotations['registry'] + '/' "
            "+ c.name).size() > 0)",
            "object.spec.containers.all(c, object.spec.containers == object.spec.containers)")):
        (folders["runtime"] / f"runtime{number}.yaml").write_text(yaml.safe_dump(
            {"id": f"runtime-{number}", "description": "what the runtime copies",
             "type": "validate", "action": "enforce", "scope": "object",
             "validations": [{"expression": expression, "message": "m"}]}))
    (folders["unique"] / "unique.yaml").write_text(yaml.safe_dump(
        {"id": "unique-names", "description": "container names are unique", "type": "validate",
         "action": "enforce", "scope": "container",
         "validations": [{"expression": "podSpec.containers.exists_one(c, c.name == "
                                        "container.name)", "message": "duplicate name"}]}))
    (folders["plain"] / "shows-env.yaml").write_text(yaml.safe_dump(
        {"id": "tries-to-show-env", "description": "shows an env value", "type": "validate",
         "action": "warn", "scope": "container",
         "validations": [{"expression": "!has(container.env)", "message": "has env",
                          "messageExpression": "'env: ' + container.env.map(e, e.value)"
                                               ".join(', ')"}]}))
    config = work / "restricted.yaml"
    config.write_text("podSecurity: {enforce: restricted}\n")
    # the largest the CEL budget lets through (the costliest allowed review), then past it
    pss_sizes, unique_sizes = ((30,), (60,)) if quick else ((1000, 1500), (200, 2000, 8000))
    runtime_sizes = (50,) if quick else (6_000,)  # with a 1 MB annotation: 2.6 MiB
    big = near_body_limit(0.2 if quick else 2.95)
    rows: list[dict[str, Any]] = []
    server = Server(work, certs, "--policies", str(folders["pss"]), "--config", str(config))
    try:
        for pss in pss_sizes:
            rows.append({"case": f"Pod of {pss:,} containers, podSecurity restricted",
                         **timed_review(server, review(filled_in(pss)))})
        sysctls = 300 if quick else 9000
        obj = filled_in(1)
        obj["spec"]["securityContext"] = {"sysctls": [
            {"name": f"net.ipv4.x{i}", "value": "0"} for i in range(sysctls)]}
        rows.append({"case": f"Pod of {sysctls:,} sysctls, podSecurity restricted",
                     **timed_review(server, review(obj))})
    finally:
        server.stop()
    server = Server(work, certs, "--policies", str(folders["runtime"]))
    try:
        for runtime in runtime_sizes:
            obj = many_containers(runtime)
            obj["metadata"]["annotations"] = {"registry": "x" * (20_000 if quick
                                                                 else 1_000_000)}
            rows.append({"case": f"map, join and compare over {runtime:,} containers",
                         **timed_review(server, review(obj))})
    finally:
        server.stop()
    server = Server(work, certs, "--policies", str(folders["unique"]))
    try:
        for unique in unique_sizes:
            rows.append({"case": f"exists_one over podSpec.containers, {unique:,} containers",
                         **timed_review(server, review(many_containers(unique)))})
    finally:
        server.stop()
    server = Server(work, certs, "--policies", str(folders["plain"]))
    try:
        rows.append({"case": f"review near the body limit ({big:,} containers), "
                             "shipped policies",
                     **timed_review(server, review(filled_in(big)))})
        rows.append(made_up_labels(server, 200 if quick else 20000))
        rows.append(secret_in_message(server))
        rows.append(past_max_connections(server, 40 if quick else 300))
    finally:
        server.stop()
    for stage in ("tcp", "headers"):
        server = Server(work, certs)
        try:
            rows.append(slow_clients(server, 100 if quick else 3000, stage))
        finally:
            server.stop()
    server = Server(work, certs)
    try:
        rows.append(huge_headers(server, 1 if quick else 64))
    finally:
        server.stop()
    for count in (2,) if quick else (2, 12, 256):
        server = Server(work, certs)
        try:
            rows.append(concurrent_reviews(server, review(filled_in(big)), count))
        finally:
            server.stop()
    return rows


def issue32_cases(work: Path, certs: Path, quick: bool) -> list[dict[str, Any]]:
    """Issue 32, items 1-3: a hostile env value, stalled request bodies, unique huge strings;
    each against the shipped policies."""
    rows: list[dict[str, Any]] = []
    server = Server(work, certs)
    try:
        for repeats in (10_000,) if quick else (100_000, 950_000):
            obj = pod()
            obj["spec"]["containers"][0]["env"] = [
                {"name": "CALLBACK", "value": "http://h/?" + "key" * repeats}]
            rows.append({"case": f"env value 'http://h/?' + 'key' * {repeats:,}",
                         **timed_review(server, review(obj))})
    finally:
        server.stop()
    for count in (2, 256):
        server = Server(work, certs)
        try:
            rows.append(stalled_bodies(server, 16 if quick and count > 2 else count))
        finally:
            server.stop()
    server = Server(work, certs)
    try:
        rows.append(unique_strings(server, *((20, 200_000) if quick else (1000, 3_000_000))))
    finally:
        server.stop()
    return rows


def stalled_bodies(server: Server, count: int) -> dict[str, Any]:
    """`count` TLS connections that send headers with `Content-Length: 2000000` and one byte
    of body, then nothing: the connections still held each second until none is, /healthz's
    worst latency and its non-200 answers meanwhile (polled every 50 ms), and the time to
    answer a valid 140 KB review sent while they are held (it needs a large-review turn)."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    def open_one(_: int) -> socket.socket | None:
        try:
            sock = server.tls(timeout=60)
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 2000000\r\n\r\n{")
            return sock
        except OSError:
            return None

    def closed(sock: socket.socket) -> float:
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass
        return time.perf_counter()

    big = pod()
    big["metadata"]["annotations"] = {"example.com/notes": "x" * 140_000}
    data = json.dumps(review(big)).encode()
    latencies: list[float] = []
    failures: list[int] = []
    stop = threading.Event()

    def poll() -> None:  # on a fresh connection each time, as the kubelet's probes come
        while not stop.is_set():
            started = time.perf_counter()
            try:
                with connect(server, 10) as client:
                    if client.get("/healthz").status_code != 200:
                        failures.append(1)
            except httpx.HTTPError:
                failures.append(1)
            latencies.append(time.perf_counter() - started)
            stop.wait(0.05)

    with ThreadPoolExecutor(8) as pool:
        socks = [sock for sock in pool.map(open_one, range(count)) if sock is not None]
    opened = time.perf_counter()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    with ThreadPoolExecutor(max(1, len(socks))) as watcher:
        closings = [watcher.submit(closed, sock) for sock in socks]
        with connect(server, 60) as client:  # sent while they are held
            started = time.perf_counter()
            try:
                answer = client.post("/validate", content=data,
                                     headers={"content-type": "application/json"})
                review_s: float | str = round(time.perf_counter() - started, 2) \
                    if answer.status_code == 200 else f"status {answer.status_code}"
            except httpx.HTTPError as error:
                review_s = type(error).__name__
        ends = [closing.result() for closing in closings]
    time.sleep(0.5)
    stop.set()
    poller.join(15)
    held = [sum(1 for end in ends if end - opened > second) for second in range(11)]
    for sock in socks:
        sock.close()
    return {"case": f"{count} connections stalling a 2 MB body after one byte",
            "opened": len(socks),
            "held_at_s_0_to_10": held,
            "all_dropped_s": round(max(ends, default=opened) - opened, 1),
            "review_140kb_s": review_s,
            "healthz_worst_s": round(max(latencies, default=0.0), 3),
            "healthz_failed": len(failures), "healthz_polls": len(latencies)}


def unique_strings(server: Server, count: int, size: int) -> dict[str, Any]:
    """`count` reviews of Pods whose image is a unique `size`-character string (pinned, so
    allowed): the server's RSS before, at its peak, and after."""
    pid = server.process.pid
    with connect(server, 120) as client:
        def send(index: int) -> int:
            obj = pod()
            obj["spec"]["containers"][0]["image"] = \
                f"r.example.com/x{index}/{'a' * (size - 40)}:1.0"
            answer = client.post("/validate", content=json.dumps(review(obj)).encode(),
                                 headers={"content-type": "application/json"})
            return answer.status_code

        for index in range(3):  # what the first big reviews allocate once
            send(-index - 1)
        before = rss_mib(pid)
        statuses = {send(index) for index in range(count)}
    after = rss_mib(pid)
    return {"case": f"{count:,} reviews with a unique {size / 1e6:g} MB image each",
            "statuses": sorted(statuses), "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(rss_mib(pid, "VmHWM"), 1),
            "rss_after_mib": round(after, 1),
            "rss_change_pct": round(100 * (after - before) / before, 1)}


def huge_headers(server: Server, mib: int) -> dict[str, Any]:
    """One client sending `mib` MiB of headers that never end; what it gets and the RSS."""
    before = rss_mib(server.process.pid)
    sent = 0
    answer = b""
    with server.tls(timeout=30) as sock, rss_sampler(server.process.pid) as samples:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\n")
        line = b"X-Pad: " + b"a" * 8185 + b"\r\n"
        try:
            while sent < mib * 1024 * 1024:
                sock.sendall(line)
                sent += len(line)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            answer = sock.recv(200)
    return {"case": f"{mib} MiB of request headers that never end",
            "sent_kib": sent // 1024, "answer": answer.split(b"\r\n", 1)[0].decode(),
            "rss_before_mib": round(before, 1), "rss_peak_mib": round(max(samples), 1)}


@contextlib.contextmanager
def rss_sampler(pid: int) -> Iterator[list[float]]:
    """Sample the server's RSS every 50 ms; yields the samples (the peak is max())."""
    samples = [rss_mib(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.05):
            samples.append(rss_mib(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(5)


def slow_clients(server: Server, count: int, stage: str) -> dict[str, Any]:
    """`count` clients that stop before the end: `tcp` never starts the TLS handshake,
    `headers` finishes it and never its request headers. Peak RSS while they are held and
    seconds until the server has dropped them all (from the last one's connect)."""
    import socket
    from concurrent.futures import ThreadPoolExecutor

    before = rss_mib(server.process.pid)

    def open_one(_: int) -> socket.socket | None:
        try:
            if stage == "tcp":
                return socket.create_connection(("127.0.0.1", server.port), timeout=30)
            sock = server.tls(timeout=30)
            sock.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nX-Slow: ")
            return sock
        except OSError:
            return None

    def closed(sock: socket.socket) -> float:
        try:
            while sock.recv(65536):
                pass
        except OSError:
            pass
        return time.perf_counter()

    with rss_sampler(server.process.pid) as samples:
        with ThreadPoolExecutor(8 if stage == "headers" else 32) as pool:
            socks = [sock for sock in pool.map(open_one, range(count)) if sock is not None]
        opened = time.perf_counter()
        with ThreadPoolExecutor(64) as pool:
            ends = list(pool.map(closed, socks))
        served = _healthz_ok(server)
    for sock in socks:
        sock.close()
    return {"case": f"{count:,} clients stopping before the end of the "
                    f"{'TLS handshake' if stage == 'tcp' else 'request headers'}",
            "opened": len(socks), "all_dropped_s": round(max(ends, default=opened) - opened, 1),
            "healthz_after": served, "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(max(samples), 1),
            "rss_after_mib": round(rss_mib(server.process.pid), 1)}


def _healthz_ok(server: Server) -> int:
    with connect(server, 10) as client:
        return client.get("/healthz").status_code


def concurrent_reviews(server: Server, body: dict[str, Any], count: int) -> dict[str, Any]:
    """`count` reviews of the same size sent at once to one worker (each on a connection of
    its own, opened first); its peak RSS and the slowest answer."""
    from concurrent.futures import ThreadPoolExecutor

    data = json.dumps(body).encode()
    before = rss_mib(server.process.pid)
    ready = threading.Barrier(count)

    def send(_: int) -> int:
        with connect(server, 300) as client:
            client.get("/healthz")
            ready.wait()
            return client.post("/validate", content=data,
                               headers={"content-type": "application/json"}).status_code

    started = time.perf_counter()
    with ThreadPoolExecutor(count) as pool:
        codes = list(pool.map(send, range(count)))
    answers = {str(code): codes.count(code) for code in sorted(set(codes))}
    return {"case": f"{count} reviews of {len(data) / 1024 / 1024:.2f} MiB at once, one worker",
            "answers": answers, "answer_s": round(time.perf_counter() - started, 2),
            "rss_before_mib": round(before, 1),
            "rss_peak_mib": round(rss_mib(server.process.pid, "VmHWM"), 1)}


def made_up_labels(server: Server, count: int) -> dict[str, Any]:
    codes: dict[int, int] = {}
    with connect(server, 30) as client:
        for number in range(count):
            body = review(pod())
            if number % 2:
                body["request"]["operation"] = f"OP{number}"
            else:
                body["request"]["kind"] = {"group": "", "version": "v1", "kind": f"K{number}"}
                body["request"]["object"]["kind"] = f"K{number}"
            code = client.post("/validate", json=body).status_code
            codes[code] = codes.get(code, 0) + 1
        size = len(client.get("/metrics").content)
    return {"case": f"{count:,} made-up kinds and operations", "answers": codes,
            "metrics_kib": round(size / 1024, 1),
            "rss_after_mib": round(rss_mib(server.process.pid), 1)}


def secret_in_message(server: Server) -> dict[str, Any]:
    obj = pod()
    obj["spec"]["containers"][0]["env"] = [{"name": "DB_PASSWORD", "value": SECRET}]
    texts = []
    with connect(server, 30) as client:
        for path in ("/validate", "/mutate"):
            texts.append(client.post(path, json=review(obj)).text)
    texts.append(server.log_path.read_text())
    joined = "\n".join(texts)
    return {"case": "messageExpression showing an env value",
            "shown_as_hidden": joined.count("env: (hidden)"),
            "leaks": joined.count(SECRET)}


def past_max_connections(server: Server, count: int) -> dict[str, Any]:
    """Open `count` idle TLS connections with a request each; count 200s and 503s."""
    before = rss_mib(server.process.pid)
    codes: dict[str, int] = {}
    with contextlib.ExitStack() as held:
        for _ in range(count):
            try:
                sock = held.enter_context(server.tls(timeout=10))
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                status = sock.recv(65536).split(b" ", 2)[1].decode()
            except OSError as error:
                status = type(error).__name__
            codes[status] = codes.get(status, 0) + 1
        during = rss_mib(server.process.pid)
    return {"case": f"{count} idle TLS connections (--max-connections 256)",
            "answers": codes, "rss_before_mib": round(before, 1),
            "rss_during_mib": round(during, 1)}


HEAD = ("apiVersion: serving.kserve.io/v1beta1\nkind: InferenceService\n"
        "metadata: {name: x, namespace: default}\nspec:\n  predictor:\n"
        "    model: {modelFormat: {name: sklearn}, storageUri: 's3://models/x'}\n")


def laughs(indent: str = "  ") -> str:
    lines = [f"{indent}a0: &a0 [" + ", ".join(["lol"] * 9) + "]"]
    lines += [f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
              for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def chain() -> str:
    lines = ["  a0: &a0 x"]
    lines += [f"  a{i}: &a{i} " + "[" * 500 + f"*a{i - 1}" + "]" * 500 for i in range(1, 40)]
    return "\n".join(lines) + "\n"


def _limit() -> None:
    # 4 GiB of address space: the Go runtime of the CEL library reserves about 1.7 GB of it
    # (not memory) when it starts; peak RSS is what the cases measure.
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def cli_cases(work: Path) -> list[dict[str, Any]]:
    reads_object = {"id": "reads-object", "description": "reads the object", "type": "validate",
                    "action": "enforce", "scope": "object",
                    "validations": [{"expression": "string(object).size() > 0",
                                     "message": "m"}]}
    policies = work / "cli-policies"
    policies.mkdir()
    (policies / "reads-object.yaml").write_text(yaml.safe_dump(reads_object))
    bombed = work / "bombed-policies"
    bombed.mkdir()
    (bombed / "params.yaml").write_text(yaml.safe_dump(reads_object) + "params:\n" + laughs())
    files = {"billion laughs": HEAD + laughs(), "anchors nested 20,000 deep": HEAD + chain()}
    rows = []
    for name, text in files.items():
        path = work / f"{name.split()[0]}.yaml"
        path.write_text(text)
        rows.append({"case": f"check: {name} ({len(text.encode()):,} bytes)",
                     **run_check("--policies", str(policies), str(path))})
    fine = work / "fine.yaml"
    fine.write_text(HEAD)
    rows.append({"case": "check: alias bomb in a policy file's params",
                 **run_check("--policies", str(bombed), str(fine))})
    replaced = work / "replace-policies"
    replaced.mkdir()
    (replaced / "replace.yaml").write_text(yaml.safe_dump(dict(reads_object, validations=[{
        "expression": "object.metadata.annotations['a'].replace('a', 'bb').replace('b', "
                      "'cc').replace('c', 'dd').size() > 0", "message": "m"}])))
    rows.append({"case": "check: three chained replace() on an annotation",
                 **run_check("--policies", str(replaced), str(fine))})
    return rows


def run_check(*args: str) -> dict[str, Any]:
    """`check` under a 4 GiB address-space limit: exit code, seconds, its own peak RSS."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        process = subprocess.Popen([sys.executable, "-m", "webhook.cli", "check", *args],
                                   stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_limit)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    problem = next((line for line in stderr.splitlines()
                    if "invalid YAML" in line or "exceeds the per-expression" in line), "")
    problem = problem.split("invalid YAML: ", 1)[-1].split("expression: ", 1)[-1]
    return {"exit": process.returncode, "answer_s": round(time.perf_counter() - started, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "problem": problem[:90]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--only", choices=("issue32",),
                        help="only the cases of issue 32: a hostile env value, stalled "
                             "bodies, unique huge strings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="quickq-guard-hostile-") as directory:
        work = Path(directory)
        certs = work / "certs"
        ensure_certs(certs, SERVICE, NAMESPACE, days=2)
        if args.only == "issue32":
            rows = issue32_cases(work, certs, args.quick)
        else:
            rows = webhook_cases(work, certs, args.quick) + issue32_cases(
                work, certs, args.quick) + cli_cases(work)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
    else:
        for row in rows:
            figures = ", ".join(f"{key}={value}" for key, value in row.items() if key != "case")
            print(f"{row['case']}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
