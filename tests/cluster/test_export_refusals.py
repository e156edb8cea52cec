"""What quickq-guard refuses to load as not Kubernetes' CEL, the real API server refuses: a
ValidatingAdmissionPolicy with each refused expression (tests/export_cel_cases.py) is not
created ("compilation failed"), while the policy export writes for each accepted expression
is. The same on every tested Kubernetes version."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import ControlPlane
from export_cel_cases import ACCEPTED, ACCEPTED_WITH_VARIABLE, REFUSED, REFUSED_WITH_VARIABLE

from webhook import PolicyError, load_policies
from webhook.export.vap import export

_INVALID = re.compile(r'validatingadmissionpolic(?:y|ies)[^"]*"qq-refusal-(\d{3})" is invalid: '
                      r"(.*?)(?=\nThe |\nError from server|\Z)", re.S | re.I)


def _policy(index: int, expression: str, variable: str | None = None) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of one validation, and with `variable` one variable `v`."""
    spec: dict[str, Any] = {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
        "resources": ["pods"]}]}}
    if variable is not None:
        spec["variables"] = [{"name": "v", "expression": variable}]
    spec["validations"] = [{"expression": expression}]
    return {"apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy", "metadata": {"name": f"qq-refusal-{index:03d}"},
            "spec": spec}


def _refused(plane: ControlPlane, policies: list[dict[str, Any]]) -> dict[int, str]:
    """Each policy created with server-side dry-run: index -> why the server refused it."""
    done = plane.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": policies}), check=False)
    return {int(index): why for index, why in _INVALID.findall(done.stderr)}


def _exported(tmp_path: Path, expressions: list[str], params: dict[str, Any] | None = None,
              variables: list[str] | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """quickq-guard's export of one policy per expression (each with its variable `v` from
    `variables`): (the policies written, policy id -> why it was refused)."""
    folder = tmp_path / "policies"
    folder.mkdir(parents=True)
    for index, expression in enumerate(expressions):
        variable = {"variables": [{"name": "v", "expression": variables[index]}]} \
            if variables else {}
        (folder / f"e{index:03d}.yaml").write_text(yaml.safe_dump({
            "id": f"e{index:03d}", "description": "d", "type": "validate",
            "action": "enforce", "match": {"kinds": ["Pod"]}, "params": params or {},
            **variable, "validations": [{"expression": expression}]}))
    done = export(load_policies(folder))
    return ([obj for obj in done.objects if obj["kind"] == "ValidatingAdmissionPolicy"],
            {refusal.policy: refusal.reason for refusal in done.refusals})


def _created(plane: ControlPlane, tmp_path: Path, expressions: list[str],
             params: dict[str, Any] | None = None, variables: list[str] | None = None
             ) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """Export one policy per expression, none refused, and create what it wrote: (the
    policies, index -> why the API server refused one)."""
    written, refusals = _exported(tmp_path, expressions, params, variables)
    assert not refusals, refusals
    for index, vap in enumerate(written):
        vap["metadata"] = {"name": f"qq-refusal-{index:03d}"}
    return written, _refused(plane, written)


def _refused_at_load(tmp_path: Path, expressions: list[str],
                     variables: list[str] | None = None) -> list[str]:
    """The expressions whose policy does not load here (the engine's CEL is Kubernetes')."""
    refused = []
    for index, expression in enumerate(expressions):
        try:
            _exported(tmp_path / f"e{index:03d}", [expression],
                      variables=[variables[index]] if variables else None)
        except PolicyError:
            refused.append(expression)
    return refused


def test_the_api_server_refuses_what_quickq_guard_refuses(plane: ControlPlane,
                                                          tmp_path: Path) -> None:
    """What Kubernetes' CEL does not compile does not load here (before: export refused it)
    and the API server refuses it."""
    expressions = sorted(REFUSED)
    assert _refused_at_load(tmp_path, expressions) == expressions, \
        "a policy loaded that the API server should refuse"
    refused = _refused(plane, [_policy(i, e) for i, e in enumerate(expressions)])
    accepted = [e for i, e in enumerate(expressions)
                if "compilation failed" not in refused.get(i, "")]
    assert not accepted, f"{plane.version()} compiles what export refuses: {accepted}"


def test_the_api_server_accepts_what_export_writes(plane: ControlPlane, tmp_path: Path) -> None:
    written, refused = _created(plane, tmp_path, ACCEPTED)
    assert not refused, f"{plane.version()} refuses what export writes: " + "; ".join(
        f"{written[i]['spec']['validations']}: {why[:300]}" for i, why in refused.items())


# Params of every shape YAML gives, and expressions over them that compile in the engine
# (params are dyn there): the exported literal is typed so that the API server compiles them too.
PARAMS = {"registries": ["a/", "b/"], "max": 200, "ratio": 0.5, "on": True, "none": None,
          "limit": float("inf"), "nested": {"mixed": [1, "x", [2]], "empty": [], "map": {}},
          "ints": {"1": 2}}
OVER_PARAMS = ["params.max == 200", "params.registries.exists(r, 'a/x'.startsWith(r))",
               "params.nested.mixed[1] == 'x'", "params.limit > 1e308",
               "params.registries[0] + 1 > 0", "[params.max, params.ratio].size() == 2",
               "params.none == null && params.on", "size(params.nested.empty) == 0"]


def test_params_of_any_shape_are_written_as_the_api_server_accepts(
        plane: ControlPlane, tmp_path: Path) -> None:
    _, refused = _created(plane, tmp_path, OVER_PARAMS, PARAMS)
    assert not refused, f"{plane.version()} refuses the exported params: " + "; ".join(
        f"{OVER_PARAMS[i]}: {why[:300]}" for i, why in refused.items())


# Misuses of a variable's type that the engine's own types show: refused when the policy
# loads, as the API server refuses them.
LOAD_REFUSED_WITH_VARIABLE = [("object.spec.containers.size()", "variables.v == 'two'"),
                              ("['a']", "variables.v.exists(n, n > 1)"),
                              ("object.metadata.name + '-x'", "variables.v + 1 == 'a-x1'")]


def test_the_api_server_types_a_variable_as_quickq_guard_does(plane: ControlPlane,
                                                              tmp_path: Path) -> None:
    """Kubernetes types `variables.v` by v's expression: what that refuses does not load
    here, and the API server refuses it; what export writes, the API server creates."""
    cases = sorted(REFUSED_WITH_VARIABLE)
    assert _refused_at_load(tmp_path / "export", [e for _, e in cases],
                            [v for v, _ in cases]) == [e for _, e in cases], \
        "a policy loaded that the API server should refuse"
    for index, (variable, expression) in enumerate(LOAD_REFUSED_WITH_VARIABLE):
        with pytest.raises(PolicyError, match="found no matching overload"):
            _exported(tmp_path / f"load{index}", [expression], variables=[variable])
    cases += LOAD_REFUSED_WITH_VARIABLE
    refused = _refused(plane, [_policy(i, e, v) for i, (v, e) in enumerate(cases)])
    accepted = [c for i, c in enumerate(cases)
                if "compilation failed" not in refused.get(i, "")]
    assert not accepted, f"{plane.version()} compiles what quickq-guard refuses: {accepted}"
    written, refused = _created(plane, tmp_path / "accepted",
                                [e for _, e in ACCEPTED_WITH_VARIABLE],
                                variables=[v for v, _ in ACCEPTED_WITH_VARIABLE])
    assert not refused, f"{plane.version()} refuses what export writes: " + "; ".join(
        f"{written[i]['spec']}: {why[:300]}" for i, why in refused.items())
