"""Fuzzing: the engine over arbitrary JSON placed at every path of a full Pod, NodeTemplate
or controller, and the real server (over TLS) over byte-level and structural mutations of a
review. The engine never raises and its answer always serialises and its patch applies; the
server answers a valid AdmissionReview or a 4xx with a JSON error, never a 500, never hangs,
and its worker never dies."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jsonpatch
from builders import gpu_container, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_helpers import Server, review

from webhook import Review, decode, evaluate
from webhook.engine.normalize import normalize
from webhook.server import admission
from webhook.server.reload import PolicySource

SETS = PolicySource(None, None).load()
DRY_RUN = PolicySource(None, None, mode="dry-run").load()
PROBE = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
         "failureThreshold": 3}


def _full_pod() -> dict[str, Any]:
    """A Pod with every field some rule reads, so every path a rule walks can be spoiled."""
    main = gpu_container(
        livenessProbe=PROBE, readinessProbe=PROBE,
        env=[{"name": "DB_PASSWORD", "value": "x"},
             {"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
        securityContext={"runAsUser": 1000, "runAsNonRoot": True},
        ports=[{"containerPort": 8080}])
    obj = workload("Pod", main, tolerations=[{"key": "zone", "operator": "Exists"}],
                   priorityClassName="gpu")
    obj["spec"]["initContainers"] = [gpu_container("init", count=1, startupProbe=PROBE)]
    obj["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox:1"}]
    obj["spec"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 1000}
    obj["metadata"].update(namespace="team-a", labels={"app": "x", "a/b~c": "ü"},
                           annotations={"kubernetes.io/x": "y"},
                           ownerReferences=[{"kind": "ReplicaSet", "name": "r"}])
    return obj


def _full_nodetemplate() -> dict[str, Any]:
    return {"apiVersion": "quickq.io/v1", "kind": "NodeTemplate",
            "metadata": {"name": "nt", "namespace": "team-a", "labels": {"app": "nt"}},
            "spec": {"image": "llm:1.0", "env": [{"name": "HF_TOKEN", "value": "v"}],
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                   "limits": {"nvidia.com/gpu": "1"}},
                     "health": {"liveness": PROBE, "startup": PROBE},
                     "securityContext": {"runAsUser": 0}, "tolerations": [],
                     "ports": [80], "command": ["serve"], "volumes": []}}


BASES = [_full_pod(), _full_nodetemplate(),
         workload("CronJob", gpu_container(livenessProbe=PROBE))]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


TARGETS = [(index, path) for index, base in enumerate(BASES) for path in _paths(base)]

KEYS = st.text(max_size=6) | st.sampled_from(["a/b", "~", "~1", "~0/", "", "ключ", "🔑",
                                              "containers", "name", "-", "0"])
SCALARS = (st.none() | st.booleans() | st.integers(-(2**64), 2**64)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
           | st.sampled_from(["", "0", "-1", "1e309", "latest", "nvidia.com/gpu", "\u202e",
                              "\x00", "a" * 300]))
ANY_JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(KEYS, inner, max_size=4), max_leaves=16)


def _put(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = obj
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return obj


def _check_decision(obj: Any, decision: Any, mutating: bool, dry_run: bool = False) -> None:
    for result in decision.results:
        if result.status == "error":  # dry-run admits what it cannot judge, with a warning
            assert result.reason and (dry_run or not decision.allowed)
            assert "Traceback" not in result.reason
            assert "failed (" not in result.reason, f"a rule crashed: {result.reason}"
    parsed = admission.parse_review(json.dumps(review({"kind": "Pod"})).encode())
    answer = json.loads(admission.dumps(admission.respond(parsed, decision, mutating=mutating)))
    assert isinstance(answer["response"]["allowed"], bool)
    if decision.patch:
        operations = json.loads(base64.b64decode(answer["response"]["patch"]))
        # the patch is for the object as the API server hands it to the webhook
        applied = normalize(obj)[0]
        assert jsonpatch.apply_patch(copy.deepcopy(applied), operations) == decision.patched


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(target=st.sampled_from(TARGETS), value=ANY_JSON,
       operation=st.sampled_from(["CREATE", "UPDATE"]), dry_run=st.booleans())
def test_engine_never_raises_with_any_json_at_any_path(target: tuple[int, tuple[Any, ...]],
                                                      value: Any, operation: str,
                                                      dry_run: bool) -> None:
    index, path = target
    obj = _put(copy.deepcopy(BASES[index]), path, value)
    sent = copy.deepcopy(obj)
    old = BASES[index] if operation == "UPDATE" else None
    for policies, mutating in ((DRY_RUN if dry_run else SETS).validate, False), \
            ((DRY_RUN if dry_run else SETS).mutate, True):
        decision = evaluate(decode(obj), policies, Review(
            operation=operation, old_object=decode(old), namespace="team-a", username="alice"))
        assert obj == sent, "evaluate changed its input"
        _check_decision(obj, decision, mutating, dry_run)
    # The spoiled object as the old object of an update of the sound one.
    if operation == "UPDATE":
        decision = evaluate(decode(BASES[index]),
                            SETS.validate,
                            Review(operation="UPDATE", old_object=decode(obj)))
        _check_decision(BASES[index], decision, False)


# Through the real server ---------------------------------------------------------------



def _check_answer(answer: httpx.Response, body: bytes) -> None:
    assert answer.status_code in (200, 400, 413), (answer.status_code, answer.text[:300])
    data = answer.json()
    if answer.status_code != 200:
        assert isinstance(data["error"], str) and data["error"]
        return
    sent = json.loads(body)
    assert data["apiVersion"] == sent["apiVersion"] and data["kind"] == "AdmissionReview"
    assert data["response"]["uid"] == sent["request"]["uid"]
    assert isinstance(data["response"]["allowed"], bool)
    assert ("patch" in data["response"]) == ("patchType" in data["response"])


BASE_BODY = json.dumps(review(_full_pod())).encode()


@st.composite
def mangled(draw: Any) -> bytes:
    """The bytes of a valid review with a few bytes replaced, inserted, deleted or cut."""
    data = bytearray(BASE_BODY)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        how = draw(st.sampled_from(["replace", "insert", "delete", "truncate"]))
        chunk = draw(st.binary(min_size=1, max_size=4)
                     | st.sampled_from([b'"', b"{", b"]", b",", b"\\", b"\\u0000", b"\xc3",
                                        b"null", b"1e999", b'"\\ud800"', b"\xef\xbb\xbf"]))
        if how == "replace":
            data[at:at + len(chunk)] = chunk
        elif how == "insert":
            data[at:at] = chunk
        elif how == "delete":
            del data[at:at + len(chunk)]
        else:
            del data[at:]
    return bytes(data)


REVIEW_PATHS = [p for p in _paths(json.loads(BASE_BODY)) if p]


@st.composite
def structurally_odd(draw: Any) -> bytes:
    """Any JSON at any path of the review; duplicated keys; keys with / ~ and unicode."""
    body = json.loads(BASE_BODY)
    body = _put(body, draw(st.sampled_from(REVIEW_PATHS)), draw(ANY_JSON))
    text = json.dumps(body, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # a duplicated key: the last one wins in the parser
        key = draw(st.sampled_from(['"kind": ', '"request": ', '"uid": ', '"object": ',
                                    '"containers": ', '"name": ']))
        text = text.replace(key, key + json.dumps(draw(ANY_JSON)) + ", " + key, 1)
    return text.encode()


@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=mangled() | structurally_odd(), path=st.sampled_from(["/validate", "/mutate"]))
def test_server_answers_every_mangled_review_validly(client: httpx.Client, body: bytes,
                                                     path: str) -> None:
    answer = client.post(path, content=body, headers={"content-type": "application/json"},
                         timeout=5)
    _check_answer(answer, body)


def test_the_worker_survived_the_fuzzing(server: Server, client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    assert server.process.poll() is None
    log = server.log_path.read_text() + server.err_path.read_text()
    assert "Traceback" not in log and '"level":"error"' not in log
