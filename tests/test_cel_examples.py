"""The default policies re-expressed in CEL (examples/policies/) give the built-in rules'
verdicts: the same outcome and the same containers named, over generated Pods, controllers
and NodeTemplates."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from builders import POD_SPEC_PATHS, node_template, workload
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook import Decision, decode, evaluate, load_policies
from webhook.engine.policy import PolicySet
from webhook.loader import default_policies_dir

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "policies"
PAIRS = ["disallow-latest-tag", "require-requests", "require-labels", "disallow-root-user"]

IMAGES = st.sampled_from(["app", "app:latest", "app:1.2.3", "registry:5000/app",
                          "registry:5000/app:2", "app@sha256:" + "b" * 64, "app@sha256:",
                          "app:latest@sha256:" + "c" * 64, "app:", "", "  ", 42, None])
QUANTITIES = st.sampled_from(["100m", "1", "1Gi", None, "0", "0m", 0])
LABELS = st.sampled_from([{"app": "x"}, {}, {"team": "a"}, {"app.kubernetes.io/name": "x"}])
CONTEXTS = st.fixed_dictionaries({}, optional={
    "runAsUser": st.sampled_from([0, 1000, None, True]),
    "runAsNonRoot": st.sampled_from([True, False, None])})


@st.composite
def container_fields(draw: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    image = draw(IMAGES)
    if image is not None:
        fields["image"] = image
    if draw(st.booleans()):
        fields["resources"] = {
            which: draw(st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                        QUANTITIES, max_size=3))
            for which in ("requests", "limits") if draw(st.booleans())}
    if draw(st.booleans()):
        fields["securityContext"] = draw(CONTEXTS)
    return fields


@st.composite
def objects(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from([*POD_SPEC_PATHS, "NodeTemplate"]))
    labels = draw(LABELS)
    if kind == "NodeTemplate":
        obj = node_template()
        obj["spec"] = draw(container_fields())
        obj["metadata"]["labels"] = labels
        return obj
    names = draw(st.lists(st.sampled_from(["a", "b", "model"]), min_size=1, max_size=3,
                          unique=True))
    containers = [{"name": name, **draw(container_fields())} for name in names]
    changes: dict[str, Any] = {"securityContext": draw(CONTEXTS)}
    if draw(st.booleans()):
        changes["initContainers"] = [{"name": "init", **draw(container_fields())}]
    if draw(st.integers(0, 3)) == 0:
        changes["ephemeralContainers"] = [{"name": "debug", **draw(container_fields())}]
    obj = workload(kind, *containers, labels=labels, **changes)
    if kind != "Pod":  # the pods' labels are the template's, which may differ
        spec = obj["spec"]["jobTemplate"]["spec"] if kind == "CronJob" else obj["spec"]
        spec["template"]["metadata"]["labels"] = draw(LABELS)
    return obj


def _single(directory: Path, name: str, tmp: Path) -> PolicySet:
    """A policy set of one policy file."""
    folder = tmp / f"{directory.parent.name}-{directory.name}-{name}"
    folder.mkdir()
    shutil.copy(directory / f"{name}.yaml", folder)
    return load_policies(folder)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[PolicySet, PolicySet]]:
    tmp = tmp_path_factory.mktemp("pairs")
    return [(_single(default_policies_dir(), name, tmp), _single(EXAMPLES, name, tmp))
            for name in PAIRS]


def _verdict(decision: Decision) -> tuple[str, str, list[str | None]]:
    [result] = decision.results
    return (decision.outcome, result.status,
            sorted({found.container or "" for found in result.findings}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(obj=objects())
def test_the_cel_examples_give_the_built_in_verdicts(pairs, obj):
    for built_in, written in pairs:
        assert _verdict(evaluate(decode(obj), written)) == \
            _verdict(evaluate(decode(obj), built_in)), (built_in.policies[0].id, obj)


def test_the_pairs_disagree_when_the_cel_policy_is_wrong(pairs, tmp_path):
    """The comparison can fail: a CEL policy that forgets initContainers is caught."""
    text = (EXAMPLES / "disallow-latest-tag.yaml").read_text()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "p.yaml").write_text(text.replace(
        "variables.image.trim() == '' ||", "containerGroup == 'initContainers' ||"))
    obj = workload("Pod", {"name": "a", "image": "app:1"},
                   initContainers=[{"name": "init", "image": "app:latest"}])
    built_in = pairs[0][0]
    assert _verdict(evaluate(decode(obj), built_in))[2] == ["init"]
    assert _verdict(evaluate(decode(obj), load_policies(broken))) != _verdict(evaluate(decode(obj),
                                                                               built_in))


def test_the_examples_are_not_loaded_with_the_shipped_policies():
    shipped = {policy.id for policy in load_policies().policies}
    assert shipped and not any(name.startswith("cel-") for name in shipped)
    assert {policy.id for policy in load_policies(EXAMPLES).policies} == {
        f"cel-{name}" for name in PAIRS}
