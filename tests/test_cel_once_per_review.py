"""A review converts its object once for all its CEL policies (issue 23): every CEL
evaluation of a review reads one activation (webhook.engine.rules.cel_review), each policy's
params bound by its own program. Counted through the runtime's seam (the activations made),
not timed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from builders import container, pod
from builders import policies_in as policies

from webhook import evaluate
from webhook.engine import cel
from webhook.manifests import read_text

ML_WORKLOADS = Path(__file__).resolve().parent / "ml_workloads"


@pytest.fixture
def activations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The data of each activation made (each converts what its evaluations read)."""
    made: list[Any] = []
    real = cel._activation
    monkeypatch.setattr(cel, "_activation",
                        lambda environment, data: made.append(data) or real(environment, data))
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
    decision = evaluate(obj, loaded)
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
    decision = evaluate(job, loaded)
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
    decision = evaluate(pod(container("a")), loaded)
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
    decision = evaluate(pod(container("a"), container("b")), loaded)
    assert [f.message for r in decision.results if r.policy == "told-0"
            for f in r.findings] == ["container 'a': image registry.example.com/app:1.2.3",
                                     "container 'b': image registry.example.com/app:1.2.3"]
    assert len(activations) == 2

