"""Properties of evaluate() over generated Pods, controllers and NodeTemplates: it never raises,
its patch applies cleanly and only adds what the rules own, the patched object needs no further
patch, and judging the patched object gives the verdict the engine already reported."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from builders import CONTROLLERS, POD_SPEC_PATHS, default_policies, with_config, workload
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from webhook import Review, decode, evaluate
from webhook.engine.normalize import normalize

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

QUANTITIES = st.sampled_from(["100m", "1", "2", "0.5", "1Gi", "256Mi", "1e3", "0", 1, 2, 0, 0.5,
                              "1GB", "500mi", "-1", "", "4", "8Gi"])
RESOURCE_NAMES = st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu",
                                  "nvidia.com/mig-1g.5gb", "ephemeral-storage"])
# YAML turns keys like `1:` or `yes:` into numbers and booleans.
ODD_RESOURCE_NAMES = RESOURCE_NAMES | st.sampled_from([1, True])
IMAGES = st.sampled_from(["app", "app:latest", "app:1.2.3", "registry:5000/app",
                          "registry:5000/app:2", "app@sha256:" + "b" * 64,
                          "app:latest@sha256:" + "c" * 64, ""])
ENV_NAMES = st.sampled_from(["DB_PASSWORD", "TOKENIZER_PATH", "LOG_LEVEL", "GITHUB_TOKEN",
                             "SECRET_NAME", "AWS_SECRET_ACCESS_KEY", "api-key"])
HANDLERS = st.sampled_from([
    {"httpGet": {"path": "/healthz", "port": 8080}},
    {"tcpSocket": {"port": 9000}},
    {"exec": {"command": ["true"]}},
    {"grpc": {"port": 50051}},
])
TOLERATIONS = st.sampled_from([
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
    {"key": "amd.com/gpu", "operator": "Exists"},
    {"operator": "Exists"},
    {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
])
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=4) | st.integers(0, 2) | st.booleans(), inner, max_size=3),
    max_leaves=6,
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


@st.composite
def probes(draw: Any) -> dict[str, Any]:
    found = dict(draw(HANDLERS))
    for field in ("periodSeconds", "failureThreshold", "timeoutSeconds"):
        value = draw(optional(st.integers(1, 30)))
        if value is not None:
            found[field] = value
    return found


@st.composite
def container_fields(draw: Any) -> dict[str, Any]:
    """The fields a container and a NodeTemplate spec share."""
    fields: dict[str, Any] = {"image": draw(IMAGES)}
    if draw(st.booleans()):
        fields["resources"] = {
            which: draw(st.dictionaries(RESOURCE_NAMES, QUANTITIES, max_size=4))
            for which in ("requests", "limits") if draw(st.booleans())}
    env = draw(st.lists(st.fixed_dictionaries(
        {"name": ENV_NAMES},
        optional={"value": st.sampled_from(["x", "", "s3cr3t"]),
                  "valueFrom": st.just({"secretKeyRef": {"name": "s", "key": "k"}})}),
        max_size=3))
    if env:
        fields["env"] = env
    context = draw(st.fixed_dictionaries({}, optional={
        "runAsUser": st.sampled_from([0, 1000]), "runAsNonRoot": st.booleans()}))
    if context or draw(st.booleans()):
        fields["securityContext"] = context
    return fields


@st.composite
def containers(draw: Any, name: str) -> dict[str, Any]:
    found = {"name": name, **draw(container_fields())}
    if draw(st.booleans()):
        found["livenessProbe"] = draw(probes())
    if draw(st.integers(0, 4)) == 0:
        found["startupProbe"] = draw(probes())
    if draw(st.integers(0, 5)) == 0:
        found[draw(st.sampled_from(["ports", "args", "x-junk"]))] = draw(JUNK)
    return found


@st.composite
def pod_specs(draw: Any) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "model"]), min_size=1, max_size=3,
                          unique=True))
    spec: dict[str, Any] = {"containers": [draw(containers(name)) for name in names]}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers("init"))]
    if draw(st.integers(0, 4)) == 0:
        spec["ephemeralContainers"] = [{"name": "debug", "image": draw(IMAGES)}]
    context = draw(st.fixed_dictionaries({}, optional={
        "runAsUser": st.sampled_from([0, 1000]), "runAsNonRoot": st.booleans()}))
    if context:
        spec["securityContext"] = context
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(TOLERATIONS, max_size=2))
    if draw(st.booleans()):
        spec["priorityClassName"] = "gpu"
    return spec


@st.composite
def objects(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["Pod", *CONTROLLERS, "NodeTemplate"]))
    metadata: dict[str, Any] = {"name": "generated", "namespace": "default"}
    if draw(st.booleans()):
        metadata["labels"] = {"app": "generated"}
    if kind == "NodeTemplate":
        spec = draw(container_fields())
        health = {}
        for probe in ("liveness", "startup"):
            if draw(st.booleans()):
                health[probe] = draw(probes())
        if health:
            spec["health"] = health
        if draw(st.booleans()):
            spec["tolerations"] = draw(st.lists(TOLERATIONS, max_size=2))
        api_version = draw(st.sampled_from(["quickq/v1", "quickq.io/v1"]))
        return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}
    obj = workload(kind, name="generated", labels=metadata.get("labels", {}))
    node = obj
    path = POD_SPEC_PATHS[kind][1]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = draw(pod_specs())
    return obj


def refused(decision: Any) -> bool:
    """The object is one the API server refuses (generated junk in a typed field)."""
    return decision.outcome == "error" and "would refuse it" in decision.message


def validate_verdicts(decision: Any) -> dict[str, Any]:
    return {r.policy: (r.status, r.findings) for r in decision.results if r.type == "validate"}


OWNED_SUFFIXES = ("/startupProbe", "/health/startup", "/tolerations", "/tolerations/-")


def undo(patched: Any, operations: list[dict[str, Any]]) -> Any:
    """The patched object with every added value taken out again."""
    document = copy.deepcopy(patched)
    for operation in reversed(operations):
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in operation["path"][1:].split("/")]
        parent = document
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        if tokens[-1] == "-":
            parent.pop()
        else:
            del parent[tokens[-1]]
    return document


@SETTINGS
@given(objects())
def test_patch_applies_adds_only_owned_fields_and_is_idempotent(obj):
    policies = default_policies()
    original = copy.deepcopy(obj)
    decision = evaluate(decode(obj), policies)
    assert obj == original
    assume(not refused(decision))
    assert all(r.status != "error" for r in decision.results), decision.results
    operations = list(decision.patch)
    for operation in operations:
        assert operation["op"] == "add"
        assert operation["path"].endswith(OWNED_SUFFIXES), operation
    # The patch is for the object as the API server hands it to the webhook.
    applied = normalize(obj)[0]
    patched = jsonpatch.apply_patch(applied, operations)
    if operations:
        assert patched == decision.patched
    assert undo(patched, operations) == applied

    again = evaluate(decode(patched), policies)
    assert again.patch == ()
    assert validate_verdicts(again) == validate_verdicts(decision)
    assert again.allowed == decision.allowed


@SETTINGS
@given(objects())
def test_an_update_that_changes_nothing_is_never_denied(obj):
    decision = evaluate(decode(obj),
                        default_policies(),
                        Review(operation="UPDATE", old_object=decode(obj)))
    assume(not refused(decision))
    assert decision.allowed, decision.message
    if obj["kind"] != "NodeTemplate":  # an unchanged pod template is never patched
        assert decision.patch == ()


@SETTINGS
@given(objects())
def test_dry_run_never_denies_or_patches_but_reports_every_enforced_failure(obj):
    enforced = evaluate(decode(obj), default_policies())
    decision = evaluate(decode(obj), with_dry_run())
    assert decision.allowed
    assert decision.patch == () and decision.patched is None
    denied = [r.policy for r in enforced.results if r.status == "fail" and r.action == "enforce"]
    for policy in denied:
        assert any(w.startswith(f"[{policy}] would deny: ") for w in decision.warnings)
        assert policy in decision.audit_annotations


_DRY_RUN = None


def with_dry_run():
    global _DRY_RUN
    if _DRY_RUN is None:
        _DRY_RUN = with_config(mode="dry-run")
    return _DRY_RUN


@SETTINGS
@given(st.one_of(JUNK, objects().flatmap(lambda obj: st.just(obj) | _spoiled(obj))))
def test_evaluate_never_raises_on_any_input(value):
    decision = evaluate(decode(value), default_policies())
    for found in decision.results:
        if found.status == "error":
            assert found.reason and not decision.allowed
            assert "Traceback" not in found.reason
            assert "failed (" not in found.reason, f"a rule crashed: {found.reason}"


def _spoiled(obj: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The object with one field somewhere replaced by junk."""

    @st.composite
    def spoil(draw: Any) -> dict[str, Any]:
        spoiled = copy.deepcopy(obj)
        node: Any = spoiled
        for _ in range(draw(st.integers(1, 8))):
            if isinstance(node, dict) and node:
                key = draw(st.sampled_from(sorted(node, key=str)))
                if not isinstance(node[key], dict | list) or draw(st.integers(0, 3)) == 0:
                    node[key] = draw(JUNK)
                    return spoiled
                node = node[key]
            elif isinstance(node, list) and node:
                index = draw(st.integers(0, len(node) - 1))
                if not isinstance(node[index], dict | list) or draw(st.integers(0, 3)) == 0:
                    node[index] = draw(JUNK)
                    return spoiled
                node = node[index]
            else:
                break
        return spoiled

    return spoil()


@SETTINGS
@given(st.sampled_from(["Pod", *CONTROLLERS, "NodeTemplate"]),
       st.dictionaries(ODD_RESOURCE_NAMES, QUANTITIES, max_size=3),
       st.dictionaries(ODD_RESOURCE_NAMES, QUANTITIES, max_size=3))
def test_resource_names_that_are_not_strings_do_not_crash_a_rule(kind, requests, limits):
    resources = {"requests": requests, "limits": limits}
    if kind == "NodeTemplate":
        obj: dict[str, Any] = {"apiVersion": "quickq/v1", "kind": kind,
                               "metadata": {"name": "n"},
                               "spec": {"image": "a:1", "resources": resources}}
    else:
        api_version, path = POD_SPEC_PATHS[kind]
        obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "n"}}
        node = obj
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = {"containers": [{"name": "a", "image": "a:1", "resources": resources}]}
    # As written: the rules' robustness on what no decoding cleaned (the API server refuses
    # most of these for a built-in kind; a custom kind's objects are judged as written).
    decision = evaluate(obj, default_policies())
    assert [r.reason for r in decision.results if r.status == "error"] == []
