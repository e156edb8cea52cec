"""A timestamp or duration a CEL mutation patches in is JSON as Kubernetes converts it: the
engine's JSON Patch value equals what a real MutatingAdmissionPolicy stores (a timestamp as
RFC 3339 text in the offset it was read with, to the nanosecond; a duration as cel-go writes
its seconds). MutatingAdmissionPolicy v1 is served from Kubernetes 1.36; on an older API
server the test skips and says so."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import ControlPlane, started, wait_until

from webhook.engine.cel import activation, compile_expression, evaluate, jsonpatch_literals
from webhook.engine.cel.moments import json_value

NAMESPACE = "cel-json"
MAP_RESOURCE = "mutatingadmissionpolicies.admissionregistration.k8s.io"
DATA = {"off": "2024-01-01T00:00:00.5+01:00", "nanos": "2024-05-06T07:08:09.123456789Z"}
VALUES = {
    "at": "timestamp(object.data.off)",
    "nanos": "timestamp(object.data.nanos)",
    "later": "timestamp('2024-01-01T00:00:00Z') + duration('1ns')",
    "early": "timestamp(object.data.nanos) - duration('123456789ns')",
    "long": "duration('123456789.123456789s')",
    "short": "duration('1ns')",
    "back": "duration('-1.5s')",
    "span": "timestamp(object.data.nanos) - timestamp(object.data.off)",
}
EXPRESSION = ("[JSONPatch{op: 'add', path: '/metadata/annotations', value: {"
              + ", ".join(f"'{key}': dyn({value})" for key, value in VALUES.items()) + "}}]")


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE}, "data": DATA}


def policy() -> list[dict[str, Any]]:
    return [{
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "qq-json"},
        "spec": {
            "failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["configmaps"]}]},
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": EXPRESSION}}],
        }}, {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "qq-json"},
        "spec": {"policyName": "qq-json", "matchResources": {"namespaceSelector": {
            "matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}}}}]


@pytest.fixture(scope="module")
def json_plane(plane: ControlPlane,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of its own: its mutating policy would patch other tests' objects."""
    with started(plane.assets, tmp_path_factory.mktemp("cel-json"), NAMESPACE) as own:
        yield own


def test_a_patched_timestamp_or_duration_is_what_the_api_server_stores(
        json_plane: ControlPlane) -> None:
    done = json_plane.kubectl("api-resources", "--api-group=admissionregistration.k8s.io",
                              "-o", "name", check=False)
    if MAP_RESOURCE not in done.stdout.split():
        pytest.skip(f"kube-apiserver {json_plane.version()} does not serve {MAP_RESOURCE} "
                    "(MutatingAdmissionPolicy v1 is GA from Kubernetes 1.36)")
    json_plane.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": policy()}))
    stored: dict[str, Any] = {}

    def patched() -> bool:
        created = json_plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                     input=json.dumps(configmap("probe")), check=False)
        if created.returncode:
            return False
        stored.update(json.loads(created.stdout)["metadata"].get("annotations") or {})
        return bool(stored)

    wait_until(patched, what="the mutating admission policy to be in force")
    compiled = compile_expression(jsonpatch_literals(EXPRESSION), "object", literals=False)
    [operation] = evaluate(compiled, activation("object", {"object": configmap("probe")}))
    ours = json_value(operation["value"])
    assert ours == stored
    assert ours["at"] == "2024-01-01T00:00:00.5+01:00" and ours["long"] == "123456789.12345679s"
