"""Container-scope CEL policies that only select fields of `podSpec` (os, hostNetwork,
securityContext: the Pod Security controls) get the pod spec without its container lists, so
a container's evaluation no longer converts every container of the pod: the cost grows with
the containers, not with their square. Policies that may see the lists get them whole."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from builders import container, pod
from builders import policies_in as policies

from webhook import decode, evaluate, load_policies
from webhook.engine.cel import selects_only
from webhook.loader import load_config

LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})


def _restricted() -> Any:
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "config.yaml"
        config.write_text("podSecurity: {enforce: restricted}\n")
        return load_policies(None, load_config(config))


def test_no_shipped_pod_security_control_needs_the_container_lists() -> None:
    readers = [p for p in _restricted().policies
               if p.cel is not None and "podSpec" in p.cel.reads]
    assert readers  # the controls read podSpec
    assert [p.id for p in readers if p.cel is not None and p.cel.reads_pod_containers] == []


@pytest.mark.parametrize(("text", "only"), [
    ("podSpec.?os.?name.orValue('') != 'windows'", True),
    ("has(podSpec.hostPID) && podSpec.securityContext.runAsNonRoot", True),
    ("podSpec.containers.exists_one(c, c.name == container.name)", False),
    ("podSpec.?initContainers.orValue([]).size() == 0", False),
    ("podSpec.size() > 0", False),
    ("podSpec.all(key, key != 'x')", False),
    ("string(podSpec).size() > 0", False),
    ("podSpec['containers'].size() > 0", False),
    ("cel.bind(spec, podSpec, spec.containers.size() > 0)", False),
    ("podSpec == podSpec", False),
])
def test_what_counts_as_selecting_fields_only(text: str, only: bool) -> None:
    assert selects_only(text, "podSpec", LISTS) is only


def _policy(expression: str) -> dict[str, Any]:
    return {"id": "reads-pod", "description": "reads the pod spec", "type": "validate",
            "action": "enforce", "scope": "container",
            "validations": [{"expression": expression, "message": "no"}]}


@pytest.mark.parametrize(("expression", "allowed"), [
    ("podSpec.containers.exists_one(c, c.name == container.name)", False),  # a duplicate
    ("podSpec.containers.size() == 2", True),
    ("podSpec.?hostNetwork.orValue(false) == false", True),
])
def test_policies_that_read_the_lists_still_see_them(tmp_path: Path, expression: str,
                                                     allowed: bool) -> None:
    obj = pod(container("app"), container("app", image="registry.example.com/b:1.0"))
    decision = evaluate(obj, policies(tmp_path, _policy(expression)))
    assert decision.allowed is allowed, decision.message
    assert allowed or "[reads-pod] container 'app': no" in decision.message


def test_a_large_pod_under_the_restricted_profile_is_judged_as_a_small_one() -> None:
    policy_set = _restricted()
    small = evaluate(decode(pod(*[container(f"c{i}") for i in range(3)])), policy_set)
    large = evaluate(decode(pod(*[container(f"c{i}") for i in range(300)])), policy_set)
    assert {r.policy: r.status for r in small.results} == \
        {r.policy: r.status for r in large.results}


@pytest.mark.parametrize(("expression", "without_spec", "allowed"), [
    ("object.metadata.name == 'web'", ("object",), True),
    ("has(object.metadata.labels) && object.?kind.orValue('') == 'Pod'", ("object",), True),
    ("object.spec.containers.size() == 2", (), True),
    ("object.spec.containers.size() == 3", (), False),
    ("size(object) > 2", (), True),
    ("oldObject == null || oldObject.metadata.name == 'web'", (), True),
])
def test_container_scope_gets_object_without_spec_only_when_nothing_can_see_it(
        tmp_path: Path, expression: str, without_spec: tuple[str, ...], allowed: bool) -> None:
    policy_set = policies(tmp_path, _policy(expression))
    [policy] = [p for p in policy_set.policies if p.id == "reads-pod"]
    assert policy.cel is not None and policy.cel.objects_without_spec == without_spec
    obj = pod(container("a"), container("b"))
    decision = evaluate(obj, policy_set)
    assert decision.allowed is allowed, decision.message
