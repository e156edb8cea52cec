"""The costliest review through the webhook is bounded by the CEL cost budget: the CEL
runtime holds the GIL (a thread would not help), so /healthz answers as soon as the review
is over. A container-scope `exists_one` over the pod's containers, once per container, took
84 s on 8,000 containers, with /healthz waiting all along; it is now "too costly to
evaluate" (denied). How long the review and /healthz take meanwhile:
benchmarks/hostile_load.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import yaml
from server_helpers import Server, pod, review

from webhook.testing import wait_until

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
        answered: list[int] = []
        done = threading.Event()

        def poll() -> None:
            with server.client() as client:
                while not done.is_set():
                    answered.append(client.get("/healthz").status_code)
                    done.wait(0.02)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        with server.client() as client:
            answer = client.post("/validate", content=body, timeout=120,
                                 headers={"content-type": "application/json"})
        before = len(answered)
        wait_until(lambda: len(answered) > before, timeout=30, what="/healthz after the review",
                   interval=0.02)
        done.set()
        poller.join(30)
        response = answer.json()["response"]
        assert response["allowed"] is False
        assert "[unique-names] CEL too costly to evaluate" in response["status"]["message"]
        assert answered and set(answered) == {200}
    finally:
        assert server.stop() == 0
