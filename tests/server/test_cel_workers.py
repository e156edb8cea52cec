"""`serve --workers 2` with a CEL policy: each uvicorn worker is a process of its own that
starts Kubernetes' CEL library (webhook/engine/cel/kubecel) itself, starts, answers, and
judges with it."""

from __future__ import annotations

from pathlib import Path

from server_helpers import Server, post, review

from webhook.testing import review_pod as pod

POLICY = """\
id: short-names
description: container names are short
type: validate
action: enforce
scope: container
validations:
- expression: size(container.name) < 8
  messageExpression: "'container name ' + container.name + ' is long'"
"""


def test_two_workers_with_a_cel_policy_start_and_judge(tmp_path: Path, certs_dir: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "short-names.yaml").write_text(POLICY)
    server = Server(tmp_path, certs_dir, "--policies", str(policies), workers=2)
    try:
        with server.client() as client:
            for _ in range(6):  # spread over both workers
                assert post(client, "/validate", review(pod()))["allowed"] is True
                long = pod()
                long["spec"]["containers"][0]["name"] = "a-long-name"
                answer = post(client, "/validate", review(long))
                assert answer["allowed"] is False
                assert "container name a-long-name is long" in answer["status"]["message"]
    finally:
        assert server.stop() == 0
    started = [line for line in server.logs()
               if line.get("message", "").startswith("Started server process")]
    assert len(started) == 2
