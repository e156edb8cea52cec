"""/healthz answers within about a second while the costliest review runs: the CEL runtime
holds the GIL (a thread would not help), so the review itself is bounded by the CEL cost
budget. A container-scope `exists_one` over the pod's containers, once per container, took
84 s on 8,000 containers, with /healthz waiting all along; it is now "too costly to
evaluate" (denied) in about a second."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import yaml
from server_helpers import Server, pod, review

UNIQUE = {"id": "unique-names", "description": "container names are unique",
          "type": "validate", "action": "enforce", "scope": "container",
          "validations": [{"expression": "podSpec.containers.exists_one(c, c.name == "
                                         "container.name)", "message": "duplicate name"}]}


def test_healthz_answers_while_a_quadratic_policy_meets_its_budget(tmp_path: Path,
                                                                   certs_dir: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "unique.yaml").write_text(yaml.safe_dump(UNIQUE))
    obj = pod()
    base = obj["spec"]["containers"][0]
    obj["spec"]["containers"] = [dict(base, name=f"c{i}") for i in range(4000)]
    body = json.dumps(review(obj)).encode()
    server = Server(tmp_path, certs_dir, "--policies", str(folder))
    try:
        latencies: list[float] = []
        done = threading.Event()

        def poll() -> None:
            with server.client() as client:
                while not done.is_set():
                    started = time.perf_counter()
                    assert client.get("/healthz").status_code == 200
                    latencies.append(time.perf_counter() - started)
                    done.wait(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        time.sleep(0.2)
        with server.client() as client:
            started = time.perf_counter()
            answer = client.post("/validate", content=body, timeout=120,
                                 headers={"content-type": "application/json"})
            seconds = time.perf_counter() - started
        done.set()
        poller.join(30)
        response = answer.json()["response"]
        assert response["allowed"] is False
        assert "[unique-names] CEL too costly to evaluate" in response["status"]["message"]
        assert seconds < 5, seconds  # before: about a minute
        assert latencies and max(latencies) < 3, max(latencies)  # before: the whole review
    finally:
        assert server.stop() == 0
