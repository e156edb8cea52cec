"""A review converts its object once for all its CEL policies (issue 23): every CEL
evaluation of a review reads one activation (webhook.engine.rules.cel_review), each policy's
params bound by its own program. And a policy evaluates a variable at most once per
container: its validations, the messages of those that fail and its mutations are each one
evaluation (webhook.engine.cel.Batch). Counted through the library's seams (the activations
it parses, the evaluations asked of it), not timed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from builders import container, pod
from builders import policies_in as policies

from webhook import decode, evaluate
from webhook.engine.cel import kubecel
from webhook.engine.rules.cel import Request
from webhook.engine.workload import read_workload
from webhook.manifests import read_text

ML_WORKLOADS = Path(__file__).resolve().parent / "ml_workloads"


@pytest.fixture
def activations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The data of each activation the library parses (each holds what its evaluations
    read)."""
    made: list[Any] = []
    real = kubecel.activation
    monkeypatch.setattr(kubecel, "activation", lambda data: made.append(data) or real(data))
    return made


def _policy(name: str, scope: str, **fields: Any) -> dict[str, Any]:
    return {"id": name, "description": f"{name} checks", "type": "validate",
            "action": "enforce", "scope": scope, **fields}


# Three policies as they come: object and container scope, matchConditions, params, podSpec.
SET = [
    _policy("registries", "container", params={"registry": "registry.example.com/"},
            matchConditions=[{"name": "not-windows",
                              "expression": "podSpec.?os.?name.orValue('') != 'windows'"},
                             {"name": "labelled",
                              "expression": "has(object.metadata.labels) || params.any"}],
            validations=[{"expression": "container.image.startsWith(params.registry)",
                          "message": "another registry"},
                         {"expression": "!podSpec.?hostNetwork.orValue(false)",
                          "message": "host network"}]),
    _policy("named", "object", params={"prefix": "w"},
            validations=[{"expression": "object.metadata.name.startsWith(params.prefix)",
                          "message": "badly named"},
                         {"expression": "request.operation == 'CREATE'",
                          "message": "not a create"}]),
    _policy("sized", "container",
            matchConditions=[{"name": "created", "expression": "request.operation != ''"}],
            validations=[{"expression": "has(container.name)", "message": "no name"}]),
]
JUDGED = {"registries", "named", "sized"}


def _job() -> dict[str, Any]:
    path = ML_WORKLOADS / "pytorchjob.yaml"
    [job] = [document.obj for document in read_text(path.read_bytes(), str(path))]
    return dict(job)


def test_a_review_converts_its_object_once_for_all_its_cel_policies(
        tmp_path: Path, activations: list[Any]) -> None:
    """Before: an activation for each policy's matchConditions and one per pod spec for its
    validations, each converting the object (or the pod spec) again: 5 here."""
    loaded = policies(tmp_path, *SET)
    obj = pod(container("a"), container("b"), initContainers=[container("i")])
    activations.clear()
    decision = evaluate(decode(obj), loaded)
    assert {r.policy: r.status for r in decision.results if r.policy in JUDGED} == {
        "registries": "pass", "named": "pass", "sized": "pass"}
    assert len(activations) == 1


def test_a_workload_of_several_pod_specs_is_converted_once(
        tmp_path: Path, activations: list[Any]) -> None:
    """A training job's pod templates are each its own pod spec: before, an activation each,
    per policy. Each container still sees its own pod spec as `podSpec`."""
    job = _job()
    worker = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"])
    worker["template"]["spec"]["hostNetwork"] = True
    job["spec"]["pytorchReplicaSpecs"]["Worker"] = worker
    loaded = policies(tmp_path, *SET)
    activations.clear()
    decision = evaluate(decode(job), loaded)
    [registries] = [r for r in decision.results if r.policy == "registries"]
    assert [f.message for f in registries.findings] == [
        "container 'pytorch' in pytorchReplicaSpecs.Master: another registry",
        "container 'pytorch' in pytorchReplicaSpecs.Worker: another registry",
        "container 'pytorch' in pytorchReplicaSpecs.Worker: host network"]
    assert {r.policy: r.status for r in decision.results if r.policy in JUDGED} == {
        "registries": "fail", "named": "fail", "sized": "pass"}
    assert len(activations) == 1


def test_each_policy_reads_its_own_params_from_the_shared_activation(tmp_path: Path) -> None:
    other = dict(SET[0], id="elsewhere", params={"registry": "ghcr.io/"})
    loaded = policies(tmp_path, SET[0], other)
    decision = evaluate(decode(pod(container("a"))), loaded)
    assert {r.policy: r.status for r in decision.results
            if r.policy in {"registries", "elsewhere"}} == {"registries": "pass",
                                                           "elsewhere": "fail"}


def test_the_messages_of_a_review_see_one_hidden_activation(
        tmp_path: Path, activations: list[Any]) -> None:
    """Messages are evaluated on the object with its secrets hidden: one more activation,
    made once for every policy that needs it, and only then."""
    told = [_policy(f"told-{n}", "container", validations=[
        {"expression": "container.image.startsWith('x/')",
         "messageExpression": "'image ' + container.image"}]) for n in range(3)]
    loaded = policies(tmp_path, *told)
    activations.clear()
    decision = evaluate(decode(pod(container("a"), container("b"))), loaded)
    assert [f.message for r in decision.results if r.policy == "told-0"
            for f in r.findings] == ["container 'a': image registry.example.com/app:1.2.3",
                                     "container 'b': image registry.example.com/app:1.2.3"]
    assert len(activations) == 2


@pytest.fixture
def comparisons(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each evaluation asked of the library for the policy "big" or "calm" (a variable is
    evaluated at most once in one, as the API server's composited variables are)."""
    made: list[Any] = []
    real = kubecel.evaluate

    def counted(policy: int, bound: int, requests: bytes) -> Any:
        if b'"p":"big"' in requests or b'"p":"calm"' in requests:
            made.append(requests)
        return real(policy, bound, requests)

    real_all = kubecel.evaluate_all

    def counted_all(bound: int, calls: bytes) -> Any:  # a review's evaluations ahead
        for _, requests in orjson.loads(calls):
            made.extend(orjson.dumps([request]) for request in requests
                        if request["p"] in ("big", "calm"))
        return real_all(bound, calls)

    monkeypatch.setattr(kubecel, "evaluate", counted)
    monkeypatch.setattr(kubecel, "evaluate_all", counted_all)
    return made


BIG = {"name": "big", "expression":
       "quantity(container.?resources.?limits.?cpu.orValue('0')).isGreaterThan(quantity('1'))"}


def _big(*names: str) -> dict[str, Any]:
    return pod(*[container(name, resources={"limits": {"cpu": "2", "memory": "1Gi"},
                                            "requests": {"cpu": "2", "memory": "1Gi"}})
                 for name in names])


def test_a_variable_is_evaluated_once_per_container_for_all_the_validations(
        tmp_path: Path, comparisons: list[Any]) -> None:
    """Three validations read it, two messages too: once for the validations, once for the
    messages of those that fail (on the object with its secrets hidden), per container.
    Before: each message was an evaluation of its own, 3 per container."""
    policy = _policy("big", "container", variables=[BIG], validations=[
        {"expression": "!variables.big", "messageExpression": "'big: ' + string(variables.big)"},
        {"expression": "!variables.big || container.name == 'x'",
         "messageExpression": "'still big: ' + string(variables.big)"},
        {"expression": "!(variables.big && true)", "message": "big"},
        {"expression": "true", "messageExpression": "'never: ' + string(variables.big)"}])
    loaded = policies(tmp_path, policy)
    comparisons.clear()
    [result] = [r for r in evaluate(decode(_big("a", "b")), loaded).results if r.policy == "big"]
    assert [f.message for f in result.findings] == [
        "container 'a': big: true", "container 'a': still big: true", "container 'a': big",
        "container 'b': big: true", "container 'b': still big: true", "container 'b': big"]
    assert len(comparisons) == 2 * 2


def test_a_variable_of_an_object_scope_policy_is_evaluated_once(
        tmp_path: Path, comparisons: list[Any]) -> None:
    variable = dict(BIG, expression=BIG["expression"].replace(
        "container", "object.spec.containers[0]"))
    policy = _policy("big", "object", variables=[variable], validations=[
        {"expression": "!variables.big", "messageExpression": "'big: ' + string(variables.big)"},
        {"expression": "!variables.big || object.metadata.name == 'x'",
         "messageExpression": "'still big: ' + string(variables.big)"},
        {"expression": "!(variables.big && true)", "message": "big"}])
    loaded = policies(tmp_path, policy)
    comparisons.clear()
    [result] = [r for r in evaluate(decode(_big("a")), loaded).results if r.policy == "big"]
    assert [f.message for f in result.findings] == ["big: true", "still big: true", "big"]
    assert len(comparisons) == 2  # before: 3


def test_a_variable_of_several_mutations_is_evaluated_once_per_container(
        tmp_path: Path, comparisons: list[Any]) -> None:
    """Before: once per mutation, 2 per container."""
    policy = {"id": "calm", "description": "calms big containers", "type": "mutate",
              "action": "enforce", "scope": "container", "variables": [BIG], "mutations": [
                  {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                      "variables.big && !has(container.stdin) ? [JSONPatch{op: 'add', "
                      "path: '/stdin', value: false}] : []")}},
                  {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                      "variables.big && !has(container.tty) ? [JSONPatch{op: 'add', "
                      "path: '/tty', value: false}] : []")}}]}
    [loaded] = [p for p in policies(tmp_path, policy).policies if p.id == "calm"]
    assert loaded.cel is not None
    workload = read_workload(_big("a", "b"), ())
    assert workload is not None
    comparisons.clear()
    [a, b] = loaded.cel.check(workload, Request())
    assert [op["path"] for op in (*a.patch, *b.patch)] == [
        "/spec/containers/0/stdin", "/spec/containers/0/tty",
        "/spec/containers/1/stdin", "/spec/containers/1/tty"]
    assert len(comparisons) == 2
