"""Faults under load: a real `quickq-guard serve` keeps answering while things change under it.

Loopback only, bounded in time and count. For --seconds (default 60) client threads hold a
steady, paced load on /validate and /mutate (kept-alive connections, and one thread that opens
a new TLS connection for every request) while the script:

1. rotates the serving certificate (same CA, new key, files replaced atomically), and checks a
   new handshake gets the new certificate;
2. reloads a valid policy set (require-labels: audit -> enforce) and checks a Pod without an
   `app` label, allowed before, is now denied;
3. rotates the serving certificate a second time;
4. installs a broken policy set (a policy file with an unknown field, plus require-labels back
   to audit) and checks it is rejected (reload-failure metric) while the previous set stays
   in force: the Pod without a label is still denied;
5. at the end, with one large review still in flight, sends SIGTERM.

Pass: no failed or dropped request, every answer a valid AdmissionReview with the expected
verdict (mutations: a patch that applies), the checks above, server RSS growth < 10% between
the first and last windows (10 s each, or a sixth of the run when shorter; measured after the
load has warmed the server up for 5 s, or a sixth of the run), exit code 0.

    .venv/bin/python benchmarks/faults_under_load.py               # 60 s
    .venv/bin/python benchmarks/faults_under_load.py --seconds 12  # the CI version
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import jsonpatch  # noqa: E402

from webhook.server.certs import ensure_certs  # noqa: E402
from webhook.testing import (  # noqa: E402
    NAMESPACE,
    SERVICE,
    Server,
    bad_pod,
    file_serial,
    metric,
    with_probe,
)
from webhook.testing import admission_review as review  # noqa: E402
from webhook.testing import review_pod as pod  # noqa: E402

EXPECTED = {  # what each load request must get back, whichever policy set is in force
    "good": ("/validate", True, False),
    "bad": ("/validate", False, False),
    "probe": ("/mutate", True, True),
}


def unlabelled() -> dict[str, Any]:
    obj = pod("nolabel")
    obj["metadata"]["labels"] = {"team": "a"}
    return obj


def check_answer(body: dict[str, Any], answer: httpx.Response, allowed: bool | None,
                 patched: bool | None, obj: dict[str, Any]) -> str | None:
    """None when `answer` is what the API server accepts and what was expected; else why."""
    if answer.status_code != 200:
        return f"HTTP {answer.status_code}: {answer.text[:200]}"
    try:
        data = answer.json()
        response = data["response"]
    except (ValueError, KeyError, TypeError):
        return f"not an AdmissionReview: {answer.text[:200]}"
    if data.get("apiVersion") != body["apiVersion"] or data.get("kind") != "AdmissionReview":
        return "wrong apiVersion/kind"
    if response.get("uid") != body["request"]["uid"]:
        return "uid mismatch"
    if not isinstance(response.get("allowed"), bool):
        return "allowed is not a boolean"
    if ("patch" in response) != ("patchType" in response):
        return "patch without patchType or the reverse"
    if allowed is not None and response["allowed"] is not allowed:
        return f"allowed={response['allowed']}, expected {allowed}"
    if patched is not None and ("patch" in response) is not patched:
        return f"patch present={'patch' in response}, expected {patched}"
    if "patch" in response:
        try:
            jsonpatch.apply_patch(copy.deepcopy(obj),
                                  json.loads(base64.b64decode(response["patch"])))
        except Exception as error:  # any failure to apply is a finding
            return f"patch does not apply: {error!r}"
    return None


class Load:
    """Paced client threads; every answer is checked and timed."""

    def __init__(self, server: Server, rate: float, threads: int) -> None:
        self.server = server
        self.interval = threads / rate
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.threads = [threading.Thread(target=self.run, args=(i, i == 0), daemon=True)
                        for i in range(threads)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def run(self, index: int, fresh_connections: bool) -> None:
        objects = {"good": pod("good"), "bad": bad_pod(), "probe": with_probe(pod("probe"))}
        names = list(EXPECTED)
        client = self.server.client()
        count = index
        next_at = time.monotonic()
        while not self.stop.is_set():
            name = names[count % len(names)]
            count += 1
            path, allowed, patched = EXPECTED[name]
            body = review(objects[name])
            if fresh_connections:  # a new TLS handshake for every request
                client.close()
                client = self.server.client()
            started = time.monotonic()
            try:
                answer = client.post(path, json=body)
                problem = check_answer(body, answer, allowed, patched, objects[name])
            except Exception as error:  # a dropped or refused request is a failure
                problem = f"{type(error).__name__}: {error}"
            elapsed = time.monotonic() - started
            with self.lock:
                self.latencies.append(elapsed)
                if problem:
                    self.failures.append(f"{name} {path}: {problem}")
            next_at += self.interval
            self.stop.wait(max(0.0, next_at - time.monotonic()))
        client.close()


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def server_pids(pid: int) -> list[int]:
    """The server process and its worker processes (children), if any."""
    pids = [pid]
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            children = (task / "children").read_text().split()
            pids += [int(c) for c in children]
    except OSError:
        pass
    return pids


def server_metric(server: Server, prefix: str) -> float:
    with server.client() as client:
        return metric(client, prefix)


def verdict(server: Server, obj: dict[str, Any]) -> bool:
    body = review(obj)
    with server.client() as client:
        answer = client.post("/validate", json=body)
    problem = check_answer(body, answer, None, False, obj)
    assert problem is None, problem
    return bool(answer.json()["response"]["allowed"])


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> float:
    """Seconds until `check()` held; raises when it did not within `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def big_review() -> dict[str, Any]:
    """A review of about 2.5 MiB that takes the server a noticeable time to judge."""
    obj = with_probe(pod("big"))
    one = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [dict(one, name=f"c{i:05d}") for i in range(9000)]
    return review(obj)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="load duration (min 6)")
    parser.add_argument("--rate", type=float, default=80.0, help="requests per second, total")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON only")
    args = parser.parse_args(argv)
    seconds = max(6.0, args.seconds)
    window = min(10.0, seconds / 6)
    warmup = min(5.0, seconds / 6)

    work = Path(tempfile.mkdtemp(prefix="quickq-guard-faults-"))
    certs = work / "certs"
    policies = work / "policies"
    shutil.copytree(REPO / "policies", policies)
    config = work / "config.yaml"
    config.write_text("mode: enforce\n")
    ensure_certs(certs, SERVICE, NAMESPACE, days=2)
    server = Server(work, certs, "--policies", str(policies), "--config", str(config),
                    workers=args.workers)
    figures: dict[str, Any] = {"seconds": seconds, "warmup_s": warmup, "rate": args.rate,
                               "workers": args.workers}
    checks: dict[str, bool] = {}
    rss: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            rss.append((time.monotonic(), rss_kib(server_pids(server.process.pid))))
            sampling.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    load = Load(server, args.rate, args.threads)
    exit_code = None
    try:
        checks["default set admits the unlabelled pod"] = verdict(server, unlabelled())
        # The load warms the server up first (caches, TLS sessions, the first allocations of
        # each code path): RSS growth is measured from there, so it shows leaks, not warm-up.
        load.start()
        time.sleep(warmup)
        started = time.monotonic()
        sampler.start()

        def at(fraction: float) -> None:
            time.sleep(max(0.0, started + fraction * seconds - time.monotonic()))

        def rotate(label: str) -> None:
            before = server.served_serial()
            ensure_certs(certs, SERVICE, NAMESPACE, days=2)  # same CA, atomic writes
            new = file_serial(certs / "tls.crt")
            figures[f"{label}_s"] = round(wait_until(lambda: server.served_serial() == new), 2)
            checks[f"{label}: new certificate served"] = new != before

        at(0.15)
        rotate("rotation1")
        at(0.30)
        write_atomically(config, "mode: enforce\npolicies:\n"
                                 "  require-labels: {action: enforce}\n")
        figures["reload_valid_s"] = round(wait_until(lambda: not verdict(server, unlabelled())),
                                          2)
        checks["valid set reloaded: unlabelled pod denied"] = True
        at(0.45)
        rotate("rotation2")
        at(0.60)
        failures_before = server_metric(
            server, 'quickq_guard_reload_failures_total{what="policies"}')
        write_atomically(policies / "zz-broken.yaml",
                         "id: zz-broken\ntype: validate\naction: enforce\nrule: require-labels\n"
                         "surprise: this field does not exist\n")
        write_atomically(config, "mode: enforce\n")  # would admit the unlabelled pod again
        figures["reload_broken_rejected_s"] = round(wait_until(lambda: server_metric(
            server, 'quickq_guard_reload_failures_total{what="policies"}') > failures_before),
            2)
        checks["broken set rejected"] = True
        checks["old set still enforced: unlabelled pod denied"] = not verdict(server,
                                                                              unlabelled())
        at(1.0)
        load.finish()
        sampling.set()  # RSS is judged under the steady load, not while the big review parses
        load_seconds = time.monotonic() - started
        # SIGTERM with one large review in flight: it is answered, then the server exits 0.
        body = big_review()
        in_flight: dict[str, Any] = {}

        def send_big() -> None:
            with httpx.Client(base_url=f"https://localhost:{server.port}",
                              verify=server.context(), timeout=60) as client:
                answer = client.post("/mutate", json=body)
            in_flight["problem"] = check_answer(body, answer, True, True,
                                                body["request"]["object"])

        sender = threading.Thread(target=send_big)
        sender.start()
        time.sleep(0.3)
        server.signal(signal.SIGTERM)
        sender.join(60)
        checks["review in flight at SIGTERM answered"] = in_flight.get("problem", "none") is None
        if in_flight.get("problem"):
            load.failures.append(f"in flight at SIGTERM: {in_flight['problem']}")
        exit_code = server.process.wait(40)
    except Exception as error:
        load.finish()
        checks[f"scenario ran: {type(error).__name__}: {error}"] = False
        load_seconds = 0.0
    finally:
        sampling.set()
        if exit_code is None:
            exit_code = server.stop()

    latencies = sorted(load.latencies)
    first = [kib for t, kib in rss if t < rss[0][0] + window] if rss else [0]
    last = [kib for t, kib in rss if t > rss[-1][0] - window] if rss else [0]
    rss_first, rss_last = statistics.mean(first), statistics.mean(last)
    growth = (rss_last - rss_first) / rss_first if rss_first else float("inf")
    log = server.log_path.read_text() + server.err_path.read_text()
    figures.update({
        "load_seconds": round(load_seconds, 1),
        "requests": len(latencies),
        "failures": len(load.failures),
        "rps": round(len(latencies) / load_seconds, 1) if load_seconds else 0,
        "p50_ms": round(1000 * latencies[len(latencies) // 2], 2) if latencies else None,
        "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 2) if latencies else None,
        "max_ms": round(1000 * latencies[-1], 2) if latencies else None,
        "rss_window_s": round(window, 1),
        "rss_first_mib": round(rss_first / 1024, 1),
        "rss_last_mib": round(rss_last / 1024, 1),
        "rss_growth_pct": round(100 * growth, 1),
        "exit_code": exit_code,
        "tracebacks_in_log": log.count("Traceback"),
    })
    checks["zero failed or dropped requests"] = not load.failures and bool(latencies)
    checks["RSS growth under 10%"] = growth < 0.10
    checks["exit code 0"] = exit_code == 0
    checks["no traceback in the server log"] = figures["tracebacks_in_log"] == 0
    passed = all(checks.values())
    result = {"passed": passed, "figures": figures, "checks": checks,
              "failures": load.failures[:20], "workdir": str(work)}
    if args.json:
        print(json.dumps(result))
    else:
        for name, value in figures.items():
            print(f"{name:28} {value}")
        for name, ok in checks.items():
            print(f"{'PASS' if ok else 'FAIL'}  {name}")
        for failure in load.failures[:20]:
            print(f"  failure: {failure}")
        print("PASSED" if passed else "FAILED")
    if passed:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
