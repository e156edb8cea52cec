"""The CEL forms of built-in rules (policies/cel-forms/, what the export writes out as
ValidatingAdmissionPolicies) give the rules' findings exactly: the same outcome, message,
container and field, on CREATE and on UPDATE, over generated Pods, controllers,
NodeTemplates and KServe model specs, and over the examples, the workloads of tests/ and the
benchmarks' corpus. The webhook and `check` keep the rule (CEL takes ~3x its time)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cel_examples import container_fields, objects
from test_export import bindings, compiled
from test_export import pairs as _vap_pairs

from webhook import Decision, evaluate, load_policies
from webhook.engine import cel as cel_module
from webhook.engine.normalize import normalize
from webhook.engine.policy import PolicySet
from webhook.engine.workload import BUILT_IN
from webhook.export.forms import FORMS_DIR
from webhook.export.vap import EXPORTED_KINDS, export
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
    assert CEL_FORMS == ["disallow-latest-tag", "disallow-root-user",
                         "liveness-probe-tolerance", "require-labels", "require-requests"]
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
# disallow-root-user's form judges every kind as the rule does but Argo's workflows, whose
# templates inherit the workflow's spec.securityContext where only the rule looks (the export
# covers no Argo kind).
NOT_ARGO = {"disallow-root-user"}


def _covered(cel: PolicySet, obj: dict[str, Any]) -> bool:
    form = cel.policies[0].id
    if form in NOT_ARGO:
        return not str(obj.get("apiVersion", "")).startswith("argoproj.io/")
    return form not in EXPORTED_ONLY or obj.get("kind") in EXPORTED_KINDS


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


@pytest.fixture(scope="module")
def corpus() -> list[dict[str, Any]]:
    """The policy test suites' objects, the examples, the real ML and other workloads of
    tests/, and the benchmarks' corpus: the corpus the native proof judges."""
    root = Path(__file__).resolve().parent.parent
    documents = [doc for folder in ("policies/tests", "examples", "tests/workloads",
                                    "tests/ml_workloads")
                 for path in sorted((root / folder).rglob("*.yaml"))
                 for doc in _documents(path)]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        from corpus import objects as generated
    finally:
        sys.path.pop(0)
    documents += [obj for _, obj in generated(2000)]
    assert len(documents) > 2000
    return documents


def test_the_corpus_of_examples_workloads_and_the_benchmark_is_judged_the_same(pairs, corpus):
    for rule, cel in pairs:
        for doc in corpus:
            if not _covered(cel, doc):
                continue
            assert _findings(evaluate(doc, cel)) == _findings(evaluate(doc, rule)), doc


def test_the_exported_forms_give_the_rules_findings_as_their_messages(pairs, corpus,
                                                                     monkeypatch):
    """Each exported form, evaluated as the API server evaluates it, on each object of the
    exported kinds as the API server hands it over: it fails exactly where the rule finds
    something, and its messages (one per failing validation, each the failing containers'
    findings joined by '; ') are together every finding of the rule, in the rule's order
    within each: what tests/cluster/test_native_proof.py asks of the API server's answers."""
    # A form's variables written into each expression make it longer than a policy file's
    # may be; the API server has no such limit.
    monkeypatch.setattr(cel_module, "MAX_EXPRESSION_LENGTH", 100_000)
    judged = Counter[str]()
    for rule, cel in pairs:
        [(vap, _)] = [pair for pair in _vap_pairs(export(cel).objects).values()]
        for doc in corpus:
            if not _exported_kind(doc) or not _covered(cel, doc):
                continue
            decision = evaluate(doc, rule)
            served, refused = normalize(doc)
            if refused or decision.skipped or any(r.policy is None for r in decision.results):
                continue  # the API server refuses it, or no policy judges it
            findings = [found.message for result in decision.results
                        for found in result.findings]
            failed = _native(vap, served, doc["metadata"].get("namespace", "d"))
            assert bool(failed) == bool(findings), (doc, failed)
            messages = [message for message in failed if message is not None]
            assert all(_joined(message, findings) for message in messages), (messages, findings)
            if len(messages) == len(failed):
                assert len("; ".join(messages)) == len("; ".join(findings)), (messages, findings)
            judged[cel.policies[0].id] += bool(findings)
    assert all(judged[form] >= 20 for form in CEL_FORMS), judged


def _native(vap: dict[str, Any], obj: dict[str, Any], namespace: str) -> list[str | None]:
    """The message of each validation of the exported policy that fails, as the API server
    evaluates them (None: a message this runtime cannot parse, nested past its depth of 32:
    liveness-probe-tolerance's, whose message the cluster proof compares)."""
    spec = vap["spec"]
    data = bindings(obj, namespace)

    def run(text: str, variables: dict[str, Any]) -> Any:
        return cel_module.evaluate(compiled(text), cel_module.activation(
            "object", {**data, "variables": variables}))

    assert all(run(c["expression"], {}) is True for c in spec.get("matchConditions", ()))
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", ()):
        variables[variable["name"]] = run(variable["expression"], variables)
    failed: list[str | None] = []
    for validation in spec["validations"]:
        if run(validation["expression"], variables) is not True:
            if "messageExpression" not in validation:
                failed.append(validation["message"])
                continue
            try:
                failed.append(run(validation["messageExpression"], variables))
            except cel_module.CelError:
                failed.append(None)
    return failed


def _exported_kind(obj: dict[str, Any]) -> bool:
    """A Pod, a built-in pod controller or a NodeTemplate: what the export judges (a Volcano
    Job is not batch/v1's)."""
    kind, api_version = obj.get("kind"), str(obj.get("apiVersion", ""))
    if kind == "NodeTemplate":
        return api_version.split("/")[0] in ("quickq", "quickq.io")
    return kind in BUILT_IN and api_version == BUILT_IN[kind].api_version


def _joined(message: str, findings: list[str]) -> bool:
    """Whether the message is some of the findings, in their order, joined by '; '."""
    for index, found in enumerate(findings):
        if message == found or (message.startswith(found + "; ")
                                and _joined(message[len(found) + 2:], findings[index + 1:])):
            return True
    return False


def _documents(path: Path) -> list[dict[str, Any]]:
    """The objects of a file; of a policy test suite, the objects it judges."""
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
    except yaml.YAMLError:
        return []
    objects = []
    for doc in documents:
        if doc.get("kind") == "PolicyTest":
            objects += [item["object"] for item in doc.get("resources", [])
                        if isinstance(item, dict) and isinstance(item.get("object"), dict)]
        else:
            objects.append(doc)
    return [obj for obj in objects if isinstance(obj.get("spec"), dict)]
