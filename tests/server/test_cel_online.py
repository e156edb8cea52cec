"""CEL policies answer the same through the webhook as offline: the same denials, warnings,
audit annotations and patch, on CREATE and on UPDATE."""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from server_helpers import Server, post, review

from webhook import Review, decode, evaluate, load_policies
from webhook.testing import container, pod

ROOT = Path(__file__).resolve().parent.parent.parent
EXTRA = [
    {"id": "no-admin-user", "description": "d", "type": "validate", "action": "warn",
     "matchConditions": [{"name": "humans", "expression":
                          "!request.userInfo.username.startsWith('system:')"}],
     "validations": [{"expression": "request.userInfo.username != 'admin'",
                      "messageExpression": "'user ' + request.userInfo.username + ' applies "
                                           "to ' + request.namespace + ' by hand'"}]},
    {"id": "default-non-root", "description": "d", "type": "mutate", "action": "enforce",
     "scope": "container",
     "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
         "has(container.securityContext) ? [] : [JSONPatch{op: 'add', "
         "path: '/securityContext', value: {'runAsNonRoot': true}}]")}}]},
    {"id": "no-legacy-model-format", "description": "d", "type": "validate",
     "action": "enforce",
     "validations": [{"expression": "object.metadata.?annotations['model-format'].orValue("
                                    "'') != 'pickle'", "reason": "Invalid",
                      "message": "serve the model as safetensors, not pickle"}]},
    {"id": "say-dry-run", "description": "d", "type": "validate", "action": "warn",
     "validations": [{"expression": "!request.dryRun",
                      "message": "a server-side dry run: nothing is stored"}]},
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cel-policies")
    for source in (ROOT / "examples" / "policies").glob("*.yaml"):
        shutil.copy(source, out)
    (out / "extra.yaml").write_text(yaml.safe_dump_all(EXTRA))
    return out


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, certs_dir: Path,
           folder: Path) -> Iterator[httpx.Client]:
    server = Server(tmp_path_factory.mktemp("server"), certs_dir, "--policies", str(folder))
    try:
        with server.client() as client:
            yield client
    finally:
        assert server.stop() == 0


def _online(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = post(client, path, body)
    return {"allowed": answer["allowed"],
            "message": answer.get("status", {}).get("message", ""),
            "warnings": answer.get("warnings", []),
            "audit": answer.get("auditAnnotations", {}),
            "patch": json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []}


def _offline(folder: Path, kind: str, obj: Any, review: Review) -> dict[str, Any]:
    policies = load_policies(folder)
    policies = type(policies)(tuple(p for p in policies.policies if p.type == kind),
                              policies.config)
    decision = evaluate(decode(obj), policies, review)
    return {"allowed": decision.allowed, "message": decision.message,
            "warnings": list(decision.warnings), "audit": dict(decision.audit_annotations),
            "patch": list(decision.patch)}


BAD = pod(container("app", image="python:latest", resources=None),
          container("side", securityContext={"runAsUser": 0}), labels={})


@pytest.mark.parametrize("obj", [pod(), BAD], ids=["good", "bad"])
@pytest.mark.parametrize("username", ["admin", "system:serviceaccount:ci:deployer"])
def test_cel_policies_answer_online_as_offline(client, folder, obj, username):
    for path, kind in (("/mutate", "mutate"), ("/validate", "validate")):
        online = _online(client, path, review(obj, namespace="team-a", username=username))
        offline = _offline(folder, kind, obj, Review(namespace="team-a", username=username,
                                                     groups=("system:authenticated",)))
        assert online == offline, path
    if obj is BAD:
        assert "[cel-disallow-latest-tag] container 'app'" in online["message"]


def test_an_update_warns_about_what_the_old_object_already_had(client, folder):
    newer = pod(container("app", image="python:latest", resources=None),
                container("new", image="python:latest"))
    online = _online(client, "/validate", review(newer, operation="UPDATE", old=BAD,
                                                 namespace="team-a"))
    offline = _offline(folder, "validate", newer, Review(
        operation="UPDATE", old_object=decode(BAD), namespace="team-a", username="alice",
        groups=("system:authenticated",)))
    assert online == offline and not online["allowed"]
    assert "container 'new'" in online["message"]
    assert any("already violated" in warning for warning in online["warnings"])


def test_the_reviews_dry_run_flag_reaches_cel_policies(client, folder):
    """kubectl apply --dry-run=server sends dryRun: true; request.dryRun reads it."""
    for dry_run in (True, False):
        online = _online(client, "/validate", review(pod(), dry_run=dry_run))
        offline = _offline(folder, "validate", pod(), Review(
            namespace="team-a", username="alice", groups=("system:authenticated",),
            dry_run=dry_run))
        assert online == offline
        said = any("nothing is stored" in warning for warning in online["warnings"])
        assert said is dry_run


@pytest.mark.parametrize(("obj", "code", "reason"), [
    (pod(container("app"), annotations={"model-format": "pickle"}), 422, "Invalid"),
    (BAD, 403, "Forbidden"),  # no reason named: Forbidden, as ValidatingAdmissionPolicy
])
def test_a_denial_answers_with_the_validations_reason(client, folder, obj, code, reason):
    """A CEL validation's `reason` is the status of the webhook's denial (and offline the
    decision's), as a ValidatingAdmissionPolicy's is."""
    status = post(client, "/validate", review(obj))["status"]
    assert (status["code"], status["reason"]) == (code, reason)
    assert _offline_reason(folder, obj) == reason


def _offline_reason(folder: Path, obj: Any) -> str:
    decision = evaluate(decode(obj), load_policies(folder))
    assert not decision.allowed
    return decision.denial_reason
