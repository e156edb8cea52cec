"""The CEL forms of built-in rules (policies/cel-forms/, what the export writes out as
ValidatingAdmissionPolicies) give the rules' findings exactly: the same outcome, message,
container and field, on CREATE and on UPDATE, over generated Pods, controllers,
NodeTemplates and KServe model specs, and over the examples, the workloads of tests/ and the
benchmarks' corpus. The webhook and `check` keep the rule (CEL takes ~3x its time)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cel_examples import container_fields, objects

from webhook import Decision, evaluate, load_policies
from webhook.engine.policy import PolicySet
from webhook.export.forms import FORMS_DIR
from webhook.export.vap import EXPORTED_KINDS
from webhook.loader import default_policies_dir

CEL_FORMS = sorted(path.stem for path in FORMS_DIR.glob("*.yaml"))
IMAGES = st.sampled_from([
    "app", "app:latest", "app:1.2.3", "registry:5000/app", "registry:5000/app:2",
    "registry:5000/app:latest", "a/b/c:latest", "app@sha256:" + "b" * 64, "app@sha256:",
    "app@sha256", "app:latest@sha256:" + "c" * 64, "a@b@c:d", "@", ":", "/", "app:", "",
    "  ", " app:1 ", "$IMAGE", "${REGISTRY}/app:1", "$(IMAGE)", "{{ .Values.image }}",
    "app:$1", "ghcr.io/org/app:v1.0-rc1", 42, None, True, ["app"]])


# Liveness probes: a field unset, zero, negative, of another type, or of any size.
PROBE_FIELDS = st.one_of(st.integers(-2, 120), st.sampled_from([None, "10", 10.0, True, []]))
PROBES = st.one_of(st.none(), st.sampled_from(["x", []]), st.fixed_dictionaries(
    {"httpGet": st.just({"path": "/healthz", "port": 8080})},
    optional={"periodSeconds": PROBE_FIELDS, "failureThreshold": PROBE_FIELDS}))


# Labels: the keys the shipped require-labels asks for (either will do), others, null values.
LABELS = st.sampled_from([
    None, {}, {"app": "web"}, {"app.kubernetes.io/name": "web"}, {"app": None},
    {"app.kubernetes.io/name": ""}, {"team": "ml"}, {"App": "web", "app.kubernetes.io/app": "x"},
    {"app": "web", "app.kubernetes.io/name": "web", "team": "ml"}])


def _label_holders(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The object and each pod template in it (a dict holding metadata and a spec)."""
    found = [obj]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "template" and isinstance(value, dict):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    return found


@st.composite
def kserve(draw: Any) -> dict[str, Any]:
    model: dict[str, Any] = {"modelFormat": {"name": "sklearn"}}
    image = draw(IMAGES)
    if image is not None:
        model["image"] = image
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": {"name": "isvc", "namespace": "default"},
            "spec": {"predictor": {"model": model, "containers": [
                {"name": "side", **draw(container_fields())}]}}}


@st.composite
def with_images(draw: Any) -> dict[str, Any]:
    """An object whose every container's image is drawn from IMAGES."""
    obj = draw(st.one_of(objects(), kserve()))

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "name" in node and ("image" in node or "resources" in node
                                   or "securityContext" in node):
                image = draw(IMAGES)
                node.pop("image", None)
                if image is not None:
                    node["image"] = image
                probe = draw(PROBES)
                if probe is not None:
                    node["livenessProbe"] = probe
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj["spec"])
    for holder in _label_holders(obj):
        labels = draw(LABELS)
        metadata = holder.setdefault("metadata", {})
        if isinstance(metadata, dict):
            metadata.pop("labels", None)
            if labels is not None:
                metadata["labels"] = labels
    probe = draw(PROBES)
    if obj["kind"] == "NodeTemplate" and probe is not None:
        obj["spec"]["health"] = {"liveness": probe}
    return obj


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[PolicySet, PolicySet]]:
    """(the shipped built-in rule, its CEL form) for each form."""
    assert CEL_FORMS == ["disallow-latest-tag", "liveness-probe-tolerance", "require-labels",
                         "require-requests"]
    out = []
    for name in CEL_FORMS:
        folders = []
        for which, source in (("rule", default_policies_dir()), ("cel", FORMS_DIR)):
            folder = tmp_path_factory.mktemp(f"{name}-{which}")
            (folder / f"{name}.yaml").write_text((source / f"{name}.yaml").read_text())
            folders.append(load_policies(folder))
        rule, cel = folders
        assert rule.policies[0].rule is not None and cel.policies[0].cel is not None
        out.append((rule, cel))
    return out


# The forms that judge only the kinds the export covers: the webhook keeps the rule for the
# ML workload kinds, whose labels are in maps and lists of templates.
EXPORTED_ONLY = {"require-labels"}


def _covered(cel: PolicySet, obj: dict[str, Any]) -> bool:
    return cel.policies[0].id not in EXPORTED_ONLY or obj.get("kind") in EXPORTED_KINDS


def _findings(decision: Decision) -> tuple[str, list[tuple[str, str | None, str, bool]]]:
    return decision.outcome, sorted(
        (found.message, found.container, found.path, found.preexisting)
        for result in decision.results for found in result.findings)


@settings(max_examples=600, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(obj=with_images(), old=with_images())
def test_the_cel_defaults_give_the_built_in_rules_findings(pairs, obj, old):
    for rule, cel in pairs:
        if not _covered(cel, obj):
            continue
        assert _findings(evaluate(obj, cel)) == _findings(evaluate(obj, rule)), obj
        if old["kind"] == obj["kind"]:
            update = {"operation": "UPDATE", "old_object": old}
            assert _findings(evaluate(obj, cel, **update)) \
                == _findings(evaluate(obj, rule, **update)), (obj, old)


def test_the_corpus_of_examples_workloads_and_the_benchmark_is_judged_the_same(pairs):
    """The examples, the real ML and other workloads of tests/, and the benchmarks' corpus."""
    root = Path(__file__).resolve().parent.parent
    documents = [doc for folder in ("examples", "tests/workloads", "tests/ml_workloads")
                 for path in sorted((root / folder).rglob("*.yaml"))
                 for doc in _documents(path)]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from corpus import objects as generated
    finally:
        sys.path.pop(0)
    documents += [obj for _, obj in generated(2000)]
    assert len(documents) > 2000
    for rule, cel in pairs:
        for doc in documents:
            if not _covered(cel, doc):
                continue
            assert _findings(evaluate(doc, cel)) == _findings(evaluate(doc, rule)), doc


def _documents(path: Path) -> list[dict[str, Any]]:
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text())
                if isinstance(doc, dict) and isinstance(doc.get("spec"), dict)]
    except yaml.YAMLError:
        return []
