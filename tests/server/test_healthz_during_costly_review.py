"""/healthz answers while the costliest review runs: a large review is judged in a thread
beside the event loop, which goes on answering probes (the CEL runtime holds the GIL for one
evaluation only, each bounded by the cost budget), and the review itself is bounded by the
CEL cost budget. A container-scope `exists_one` over the pod's containers, once per
container, took 84 s on 8,000 containers, with /healthz waiting all along; it is now "too
costly to evaluate" (denied) at once. How long the review and /healthz take meanwhile:
benchmarks/hostile_load.py."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from server_helpers import Server, pod, review

from webhook.server import app as app_module
from webhook.server.app import Guard, Settings, build_app
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
        # the API server's message for a policy past its budget
        assert "[unique-names] CEL validations[0].expression: validation failed due to running " \
               "out of cost budget" in response["status"]["message"]
        assert answered and set(answered) == {200}
    finally:
        assert server.stop() == 0


def test_healthz_is_answered_while_a_review_is_being_judged(
        certs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judgment of a large review waits until /healthz has been answered: only a
    judgment beside the event loop lets that happen (in the loop, it would wait out its 5 s
    alone)."""
    large = pod()
    large["spec"]["containers"] = [dict(large["spec"]["containers"][0], name=f"c{i}")
                                   for i in range(1000)]
    assert len(json.dumps(review(large))) > app_module.INLINE_MAX
    guard = Guard(Settings(cert=str(certs_dir / "tls.crt"), key=str(certs_dir / "tls.key"),
                           policies=None, config=None))
    judging, answered = threading.Event(), threading.Event()
    seen: list[bool] = []
    real = app_module.judge

    def judge(*args: Any) -> Any:
        judging.set()
        seen.append(answered.wait(5))
        return real(*args)

    monkeypatch.setattr(app_module, "judge", judge)

    async def run() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=build_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as client:
            posted = asyncio.create_task(client.post("/validate", json=review(large)))
            while not judging.is_set():
                await asyncio.sleep(0.01)
            health = await client.get("/healthz")
            answered.set()
            return health, await posted

    health, answer = asyncio.run(run())
    guard.judging.shutdown()
    assert health.status_code == 200 and answer.status_code == 200
    assert answer.json()["response"]["allowed"] is True
    assert seen == [True]
