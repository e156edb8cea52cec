"""Patches are proven through the real server: for generated Pods, controllers and
NodeTemplates, the /mutate patch applies, keeps a valid object valid (Kubernetes OpenAPI,
strict), touches only what the rules own (everything else byte-for-byte equal), needs no
second patch, and /validate on the result answers exactly what the library decides."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import jsonpatch
import kubernetes_validate
from builders import gpu_container, workload
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from server_helpers import post, review
from test_properties import OWNED_SUFFIXES, objects, undo

from webhook import Review, evaluate
from webhook.server import admission
from webhook.server.reload import PolicySource

VERSION = kubernetes_validate.latest_version()
LIVENESS = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
            "failureThreshold": 6}
GPU_POD = workload("Pod", gpu_container(livenessProbe=LIVENESS),
                   tolerations=[{"key": "zone", "operator": "Exists"}])
GPU_NODETEMPLATE = {
    "apiVersion": "quickq.io/v1", "kind": "NodeTemplate",
    "metadata": {"name": "nt", "namespace": "team-a", "annotations": {"a~b/c": "ü"}},
    "spec": {"image": "llm:1.0", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                               "limits": {"nvidia.com/gpu": "1"}},
             "health": {"liveness": LIVENESS}}}
# A null list item: kubernetes_validate lets it through, the API server refuses it.
NULL_PORT_POD = workload("Pod", {"name": "a", "image": "app", "ports": [None]})
SETS = PolicySource(None, None).load()

# Label and annotation keys with `/` and `~` (JSON Pointer's escapes) and unicode values:
# the rules do not own them, so they must come back untouched.
ANNOTATIONS = st.dictionaries(
    st.sampled_from(["example.com/owner", "a~b", "x/y~1z", "quickq.io/note", "plain"]),
    st.text(max_size=12), max_size=3)


@st.composite
def decorated(draw: Any) -> dict[str, Any]:
    obj = json.loads(json.dumps(draw(objects())))  # as JSON has it: string keys only
    annotations = draw(ANNOTATIONS)
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if draw(st.booleans()):
        obj["metadata"]["labels"] = {**obj["metadata"].get("labels", {}),
                                     "team.example.com/name": "ml-ünïcode"[:8]}
    return obj


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


REFUSED = "the Kubernetes API server would refuse it"


def schema_valid(obj: dict[str, Any]) -> bool:
    try:
        kubernetes_validate.validate(obj, VERSION, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError,
            kubernetes_validate.InvalidSchemaError):
        return False
    return True



def _operations(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    assert isinstance(operations, list) and operations
    return operations


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=decorated())
@example(obj=GPU_POD)
@example(obj=GPU_NODETEMPLATE)
@example(obj=NULL_PORT_POD)
def test_mutate_patch_is_proven_through_the_server(client: httpx.Client,
                                                   obj: dict[str, Any]) -> None:
    original = canonical(obj)
    body = review(obj)
    operations = _operations(post(client, "/mutate", body))
    if obj is GPU_POD or obj is GPU_NODETEMPLATE:
        assert len(operations) == 2  # a startup probe and a GPU toleration
    for operation in operations:
        assert operation["op"] == "add" and operation["path"].endswith(OWNED_SUFFIXES)
    patched = jsonpatch.apply_patch(copy.deepcopy(obj), operations)
    # What the rules do not own is byte-for-byte what was sent.
    assert canonical(undo(patched, operations)) == original
    event(f"{obj['kind']}, patched: {bool(operations)}")
    if obj["kind"] != "NodeTemplate" and schema_valid(obj):
        event("schema-valid workload")
        kubernetes_validate.validate(patched, VERSION, strict=True)
    # Reinvocation (the API server may call a mutating webhook twice) is a no-op.
    assert _operations(post(client, "/mutate", review(patched))) == []
    # /validate on the patched object answers what the library decides on it.
    second = review(patched)
    answer = post(client, "/validate", second)
    request = second["request"]
    online = Review(operation="CREATE", namespace=request["namespace"],
                    username=request["userInfo"]["username"],
                    groups=tuple(request["userInfo"]["groups"]))
    decision = evaluate(patched, SETS.validate, online)
    parsed = admission.parse_review(json.dumps(second).encode())
    expected = admission.respond(parsed, decision, mutating=False)["response"]
    assert answer == json.loads(admission.dumps(expected))
    # No API server between: the webhook got the object as written, so the offline twin
    # judges it as written too.
    offline = evaluate(patched, SETS.validate, online)
    if obj["kind"] != "NodeTemplate" and REFUSED not in offline.message:
        # An object the API server decodes gets the same answer offline (the CLI's check).
        # One it refuses (a null list item kubernetes_validate lets through, say) never
        # reaches the webhook, so there is no online answer to compare.
        assert admission.respond(parsed, offline, mutating=False)["response"] == expected
