"""`quickq-guard export --format vap`: CEL validate policies as ValidatingAdmissionPolicies.

The objects have the shape of admissionregistration.k8s.io/v1 (the 1.35 and 1.36 schemas);
actions, kinds, namespaces, users, groups and selectors map onto Kubernetes'
own fields; what cannot be exported is named with the reason. And, evaluated as the API
server evaluates them (variables, matchConditions, validations, messageExpression) with
quickq-guard's CEL runtime, the exported policies judge generated Pods, controllers and
NodeTemplates as the engine does. tests/cluster/test_export_vap.py applies them to a real
API server.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
import pytest
import yaml
from builders import POD_SPEC_PATHS
from export_cel_cases import (
    ACCEPTED,
    ACCEPTED_WITH_VARIABLE,
    REFUSED,
    REFUSED_WITH_VARIABLE,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cel_examples import objects

from webhook import Config, Review, decode, evaluate, load_policies
from webhook.engine import cel
from webhook.engine.normalize import normalize
from webhook.engine.policy import PolicyError, PolicySet
from webhook.export.forms import FORM_GAPS, FORMS_DIR, PYTHON_ONLY, with_cel_forms
from webhook.export.vap import RESOURCES, export, translate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "policies"
VAP_POLICIES = Path(__file__).resolve().parent / "vap_policies"


def load(folder: Path, **config: Any) -> PolicySet:
    return load_policies(folder, Config.model_validate(config))


def write(tmp_path: Path, *documents: dict[str, Any]) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    for document in documents:
        (folder / f"{document['id']}.yaml").write_text(yaml.safe_dump(document))
    return folder


def policy(id: str = "p", **fields: Any) -> dict[str, Any]:
    return {"id": id, "description": "d", "type": "validate", "action": "enforce",
            "validations": [{"expression": "true"}], **fields}


def pairs(objects_: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    out = {}
    for index in range(0, len(objects_), 2):
        vap, binding = objects_[index], objects_[index + 1]
        assert (vap["kind"], binding["kind"]) == ("ValidatingAdmissionPolicy",
                                                   "ValidatingAdmissionPolicyBinding")
        assert binding["spec"]["policyName"] == vap["metadata"]["name"]
        out[vap["metadata"]["annotations"]["quickq.io/policy"]] = (vap, binding)
    return out


@pytest.mark.parametrize("schema", ["1.35.0", "1.36.0"])
def test_exported_objects_have_the_kubernetes_shape(schema):
    """v1, the only version the supported releases serve (the cluster tests create them)."""
    for folder in (EXAMPLES, VAP_POLICIES):
        exported = export(load(folder, excludeNamespaces=["kube-system", "dev-*"],
                               excludeUsers=["system:serviceaccount:ci:*"]))
        assert exported.refusals == []
        assert exported.objects
        for obj in exported.objects:
            assert obj["apiVersion"] == "admissionregistration.k8s.io/v1"
            kubernetes_validate.validate(obj, schema, strict=True)


def test_actions_become_validation_actions_and_dry_run_never_denies(tmp_path):
    folder = write(tmp_path, policy("a", action="enforce"), policy("b", action="warn"),
                   policy("c", action="audit"), policy("d", action="off"))
    exported = export(load(folder))
    actions = {key: binding["spec"]["validationActions"]
               for key, (_, binding) in pairs(exported.objects).items()}
    assert actions == {"a": ["Deny"], "b": ["Warn"], "c": ["Audit"]}
    assert [(r.policy, r.reason, r.expected) for r in exported.refusals] == [
        ("d", "its action is off", True)]
    vaps = pairs(export(load(folder, mode="dry-run")).objects)
    assert vaps["a"][1]["spec"]["validationActions"] == ["Warn", "Audit"]
    assert {vap["spec"]["failurePolicy"] for vap, _ in vaps.values()} == {"Ignore"}


def test_kinds_operations_and_selectors_become_match_constraints(tmp_path):
    folder = write(tmp_path, policy(match={
        "kinds": ["Pod", "Deployment", "CronJob", "NodeTemplate"], "operations": ["CREATE"],
        "namespaces": ["prod", "ml"], "excludeNamespaces": ["ml"],
        "selector": {"matchLabels": {"tier": "gpu"}}}))
    [(vap, binding)] = pairs(export(load(folder, nodeTemplateGroups=["quickq.io"])).objects
                             ).values()
    constraints = vap["spec"]["matchConstraints"]
    assert constraints["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["pods"]},
        {"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["deployments"]},
        {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
         "resources": ["cronjobs"]},
        {"apiGroups": ["quickq.io"], "apiVersions": ["*"], "operations": ["CREATE"],
         "resources": ["nodetemplates"]}]
    assert constraints["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml", "prod"]},
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ml"]}]}
    assert constraints["objectSelector"] == {"matchLabels": {"tier": "gpu"}}
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
         "values": ["kube-node-lease", "kube-public", "kube-system"]}]}}


def test_globs_users_groups_and_mirror_pods_become_match_conditions(tmp_path):
    folder = write(tmp_path, policy(match={"namespaces": ["team-*", "prod"]}))
    loaded = load(folder, excludeNamespaces=["kube-system", "dev-?"],
                  excludeUsers=["system:serviceaccount:ci:*"], excludeGroups=["admins"])
    [(vap, binding)] = pairs(export(loaded).objects).values()
    conditions = {c["name"]: c["expression"] for c in vap["spec"]["matchConditions"]}
    assert "namespaceSelector" not in vap["spec"]["matchConstraints"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
        "values"] == ["kube-system"]

    def holds(name: str, obj: dict[str, Any], namespace: str, user: str = "",
              groups: tuple[str, ...] = ()) -> bool:
        data = bindings(obj, namespace, user=user, groups=groups)
        return bool(cel.evaluate(cel.compile_expression(conditions[name], "object"),
                                 cel.activation("object", data)))

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {}}
    assert [holds("quickq-guard-namespaces", pod, ns)
            for ns in ("team-a", "prod", "production", "tea")] == [True, True, False, False]
    assert [holds("quickq-guard-exclude-namespaces", pod, ns)
            for ns in ("dev-1", "dev-12", "team-a")] == [False, True, True]
    assert [holds("quickq-guard-exclude-users", pod, "prod", user=u)
            for u in ("system:serviceaccount:ci:bot", "alice")] == [False, True]
    assert [holds("quickq-guard-exclude-groups", pod, "prod", groups=g)
            for g in (("admins", "x"), ("devs",))] == [False, True]
    mirror = {**pod, "metadata": {"name": "x", "annotations": {
        "kubernetes.io/config.mirror": "abc"}}}
    node = ("system:node:gpu-1", ("system:nodes", "system:authenticated"))
    assert [holds("quickq-guard-not-mirror-pod", obj, "prod", *user)
            for obj in (pod, mirror) for user in (node, ("alice", ("system:nodes",)))] == [
        True, True, False, True]  # a mirror pod skipped only when a kubelet makes it


def test_what_cannot_be_exported_is_named_with_the_reason(tmp_path):
    shutil.copy(ROOT / "policies" / "disallow-latest-tag.yaml", tmp_path)
    shutil.copy(ROOT / "policies" / "inject-startup-probe.yaml", tmp_path)
    (tmp_path / "uses-params.yaml").write_text(yaml.safe_dump(policy(
        "uses-params", variables=[{"name": "params", "expression": "1"}])))
    (tmp_path / "services.yaml").write_text(yaml.safe_dump(policy(
        "services", match={"kinds": ["Service"]})))
    assert {(r.policy, r.reason, r.expected) for r in export(load(tmp_path)).refusals} == {
        ("disallow-latest-tag", "built-in rule disallow-latest-tag is written in Python, "
                                "not CEL", True),
        ("inject-startup-probe", "built-in rule inject-startup-probe is written in Python, "
                                 "not CEL", True),
        ("uses-params", "it defines a variable named params, the name the export gives "
                        "quickq-guard's params", False),
        ("services", "it judges only Service: the export finds pod specs in Pods, the "
                     "built-in pod controllers and NodeTemplates", False)}


def test_params_are_written_in_as_a_cel_literal(tmp_path):
    # (not `n:` or `y:`: policy files are read as kubectl reads YAML, where those are booleans)
    folder = write(tmp_path, policy(params={"names": ["a", "it's \"x\"", "ü"], "count": 2,
                                            "ratio": 0.5, "on": True, "none": None},
                                    validations=[{"expression": "params.count == 2"}]))
    [(vap, _)] = pairs(export(load(folder)).objects).values()
    [variable] = vap["spec"]["variables"]
    assert variable["name"] == "params"
    value = cel.evaluate(cel.compile_expression(variable["expression"], "object"),
                         cel.activation("object", bindings({}, "")))
    assert value == {"names": ["a", "it's \"x\"", "ü"], "count": 2, "ratio": 0.5,
                     "on": True, "none": None}
    assert vap["spec"]["validations"] == [{"expression": "variables.params.count == 2",
                                           "message": "failed expression: params.count == 2"}]


def test_the_command_writes_yaml_names_refusals_and_sets_its_exit_code(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "webhook.cli", "export", *args],
                              capture_output=True, text=True, cwd=ROOT, check=False)

    done = run("--format", "vap", "--policies", str(EXAMPLES))
    assert done.returncode == 0, done.stderr
    documents = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in documents] == ["ValidatingAdmissionPolicy",
                                              "ValidatingAdmissionPolicyBinding"] * 4
    assert done.stderr.strip().splitlines()[-1] == (
        "quickq-guard: note: exported 4 policies as admissionregistration.k8s.io/v1")

    # The shipped policies are built-in rules: those with a CEL form (policies/cel-forms/)
    # are written out from it, the others are named as Python.
    done = run("--format", "vap")
    assert done.returncode == 0, done.stderr
    assert [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout)] == [
        ("ValidatingAdmissionPolicy", "quickq-guard-disallow-latest-tag"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-disallow-latest-tag"),
        ("ValidatingAdmissionPolicy", "quickq-guard-disallow-root-user"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-disallow-root-user"),
        ("ValidatingAdmissionPolicy", "quickq-guard-gpu-priority-class"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-gpu-priority-class"),
        ("ValidatingAdmissionPolicy", "quickq-guard-liveness-probe-tolerance"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-liveness-probe-tolerance"),
        ("ValidatingAdmissionPolicy", "quickq-guard-no-plaintext-secrets"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-no-plaintext-secrets"),
        ("ValidatingAdmissionPolicy", "quickq-guard-require-gpu-limits"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-require-gpu-limits"),
        ("ValidatingAdmissionPolicy", "quickq-guard-require-labels"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-require-labels"),
        ("ValidatingAdmissionPolicy", "quickq-guard-require-requests"),
        ("ValidatingAdmissionPolicyBinding", "quickq-guard-require-requests")]
    assert "quickq-guard: note: gpu-claim-usage: not exported: built-in rule " \
           "gpu-claim-usage is written in Python, not CEL" in done.stderr

    shutil.copytree(EXAMPLES, tmp_path / "p")
    (tmp_path / "p" / "services.yaml").write_text(yaml.safe_dump(policy(
        "services", match={"kinds": ["Service"]})))
    out = tmp_path / "vap.yaml"
    done = run("-o", "vap", "--policies", str(tmp_path / "p"), "-O", str(out))
    assert done.returncode == 1
    assert "quickq-guard: note: services: not exported: it judges only Service" in done.stderr
    assert len(list(yaml.safe_load_all(out.read_text()))) == 8
    assert "deprecated" not in done.stderr

    # -o FILE, as -o meant here before -o named the format everywhere: still written, noted
    old = tmp_path / "old.yaml"
    done = run("--format", "vap", "--policies", str(tmp_path / "p"), "-o", str(old))
    assert done.returncode == 1 and old.read_text() == out.read_text()
    assert f"export -o FILE is deprecated: -o names the format, as in check; write `-o vap " \
           f"-O {old}`" in done.stderr
    done = run("-o", str(old), "--policies", str(EXAMPLES))
    assert done.returncode == 2 and "not a format; choose one of vap, map, native" in done.stderr
    done = run("--policies", str(EXAMPLES))
    assert done.returncode == 2 and "export needs a format: -o vap|map|native" in done.stderr

    # v1beta1 went with Kubernetes 1.28 and 1.29: no supported release serves it.
    done = run("--format", "vap", "--api-version", "v1beta1", "--policies", str(EXAMPLES))
    assert done.returncode == 2 and "unrecognized arguments: --api-version" in done.stderr

    done = run("--format", "rego")
    assert done.returncode == 2 and "invalid choice: 'rego'" in done.stderr


# --- the exported policies judge as the engine does ----------------------------------------

def bindings(obj: Any, namespace: str, user: str = "", groups: tuple[str, ...] = (),
             operation: str = "CREATE") -> dict[str, Any]:
    """What the API server binds for a ValidatingAdmissionPolicy expression."""
    kind = obj.get("kind", "") if isinstance(obj, dict) else ""
    api_version = obj.get("apiVersion", "") if isinstance(obj, dict) else ""
    return {"object": obj, "oldObject": None, "namespaceObject": None, "params": None,
            "podSpec": None, "variables": {},
            "request": {"operation": operation, "namespace": namespace, "name": "x",
                        "kind": {"group": api_version.rpartition("/")[0],
                                 "version": api_version.rpartition("/")[2], "kind": kind},
                        "userInfo": {"username": user, "groups": list(groups)},
                        "dryRun": False}}


def vap_judges(vap: dict[str, Any], obj: dict[str, Any], namespace: str
               ) -> tuple[str, list[str]]:
    """pass, skip, fail (with the messages) or error, as the API server would judge: the
    policy compiled as its plugin compiles it (variables composited), by Kubernetes' CEL."""
    spec = vap["spec"]
    bound = cel.activation("object", bindings(obj, namespace))
    conditions, validations = vap_programs(orjson.dumps(spec))
    try:
        if any(cel.evaluate(condition, bound) is False for condition in conditions):
            return "skip", []
        messages = []
        for validation, (check, message) in zip(spec["validations"], validations,
                                                  strict=True):
            if cel.evaluate(check, bound) is not True:
                messages.append(cel.evaluate(message, bound) if message is not None
                                else validation["message"])
    except cel.EvaluationError:
        return "error", []
    return ("fail", messages) if messages else ("pass", [])


@cache
def vap_programs(encoded: bytes) -> tuple[list[cel.Expression],
                                          list[tuple[cel.Expression, cel.Expression | None]]]:
    """A ValidatingAdmissionPolicy's matchConditions and (validation, messageExpression)
    pairs, compiled once however many objects they judge."""
    spec = orjson.loads(encoded)
    variables = [(v["name"], cel.Source(f"variables[{i}]", v["expression"]))
                 for i, v in enumerate(spec.get("variables", ()))]
    sources = [cel.Source(f"m{i}", c["expression"], "bool")
               for i, c in enumerate(spec.get("matchConditions", ()))]
    for index, validation in enumerate(spec["validations"]):
        sources.append(cel.Source(f"v{index}", validation["expression"], "bool"))
        if "messageExpression" in validation:
            sources.append(cel.Source(f"v{index}m", validation["messageExpression"], "string"))
    compiled, _ = cel.compile_policy("object", variables, sources)
    by_field = {source.field: expression for source, expression
                in zip(sources, compiled, strict=True)}
    conditions = [by_field[f"m{i}"] for i in range(len(spec.get("matchConditions", ())))]
    return conditions, [(by_field[f"v{i}"], by_field.get(f"v{i}m"))
                        for i in range(len(spec["validations"]))]


@pytest.fixture(scope="module")
def exported_sets() -> list[tuple[PolicySet, dict[str, dict[str, Any]]]]:
    out = []
    # the examples, the cluster test's policies, and the Pod Security Standards' restricted
    # profile, whose controls mix pod-level and container-level checks
    for loaded in (load(EXAMPLES), load(VAP_POLICIES),
                   load(VAP_POLICIES, podSecurity={"enforce": "restricted"})):
        out.append((loaded, {key: vap for key, (vap, _) in pairs(export(loaded).objects).items()}))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=objects(), privileged=st.booleans(), gpu=st.booleans(), host=st.booleans())
def test_exported_policies_judge_as_the_engine_does(exported_sets, obj, privileged, gpu, host):
    if gpu:
        obj["metadata"]["labels"] = {**obj["metadata"]["labels"], "tier": "gpu"}
    if obj["kind"] == "NodeTemplate":
        if privileged:
            obj["spec"]["securityContext"] = {"privileged": True}
    else:
        spec = obj
        for key in POD_SPEC_PATHS[obj["kind"]][1]:
            spec = spec[key]
        if privileged:
            spec["containers"][0]["securityContext"] = {"privileged": True}
        if host:
            spec["hostNetwork"] = True
    # A policy on the API server sees the object decoded and defaulted (a null quantity is 0)
    stored, _ = normalize(obj)
    for loaded, vaps in exported_sets:
        decision = evaluate(decode(obj), loaded, Review(namespace="default"))
        if any(result.policy is None for result in decision.results):
            continue  # the API server refuses the object before any admission policy runs
        for result in decision.results:
            vap = vaps[str(result.policy)]
            resource = RESOURCES.get(obj["kind"], ("", "nodetemplates"))[1]
            rules = vap["spec"]["matchConstraints"]["resourceRules"]
            if not any(resource in rule["resources"] for rule in rules):
                assert result.status == "skip"
                continue
            status, messages = vap_judges(vap, stored, "default")
            assert status == result.status, (result, messages)
            # quickq-guard writes a message on one line; the API server as the policy says
            text = " ".join("; ".join(messages).split())
            for found in result.findings:
                assert found.message in text


@pytest.mark.parametrize("name", ["namespace", "package", "var"])
def test_a_variable_named_with_a_word_kubernetes_reserves_is_not_exported(tmp_path, name):
    """The API server refuses a ValidatingAdmissionPolicy whose variable is named `namespace`
    (a reserved word of CEL), though quickq-guard's CEL reads it as `variables.namespace`."""
    folder = write(tmp_path, policy(variables=[{"name": name, "expression": "1"}],
                                    validations=[{"expression": f"variables.{name} == 1"}]))
    [refusal] = export(load(folder)).refusals
    assert f"a variable named {name}, a word Kubernetes 1.35 and 1.36 reserve" in refusal.reason


def test_translate_keeps_object_scope_expressions_as_written(tmp_path):
    folder = write(tmp_path, policy(validations=[{
        "expression": "object.metadata.name.startsWith('a') // a comment\n && true",
        "messageExpression": "'name ' + object.metadata.name"}]))
    [only] = load(folder).policies
    vap, _ = translate(only, Config())
    assert vap["spec"]["validations"] == [{
        "expression": "object.metadata.name.startsWith('a') // a comment\n && true",
        "messageExpression": "'name ' + object.metadata.name",
        "message": "failed expression: object.metadata.name.startsWith('a') // a comment && "
                   "true"}]


def test_params_of_mixed_types_are_written_as_kubernetes_cel_accepts_them(tmp_path):
    """Kubernetes' CEL refuses a map literal whose values differ in type (`expected type
    'list(string)' but found 'int'`): each such value is written as dyn(...)."""
    folder = write(tmp_path, policy(params={"registries": ["a/"], "max": 200,
                                            "same": {"a": 1, "b": 2}},
                                    validations=[{"expression": "params.max == 200"}]))
    [(vap, _)] = pairs(export(load(folder)).objects).values()
    [variable] = vap["spec"]["variables"]
    assert variable["expression"] == \
        'dyn({"max": dyn(200), "registries": dyn(["a/"]), "same": dyn({"a": 1, "b": 2})})'


def test_each_default_validate_rule_has_a_cel_form_or_a_reason_in_the_docs():
    """A built-in validate rule is exported from its CEL form, or `export` and the table of
    docs/export.md say why it stays Python."""
    off = {"require-kueue-queue": {"action": "audit"}}  # off as shipped: exported once on
    shipped = load_policies(config=Config.model_validate({"policies": off}))
    forms = {path.stem for path in FORMS_DIR.glob("*.yaml")}
    rules = {p.id for p in shipped.policies if p.type == "validate" and p.rule is not None}
    assert rules == forms | set(PYTHON_ONLY) and not forms & set(PYTHON_ONLY)
    exported = export(with_cel_forms(shipped))
    refused = {r.policy: r.reason for r in exported.refusals}
    assert sorted(p for p in rules if p not in refused) == sorted(forms)
    page = (ROOT / "docs" / "export.md").read_text()
    for policy, why in PYTHON_ONLY.items():
        assert why in refused[policy]
        assert f"| `{policy}` |" in page, policy
    # What an exported form leaves to the webhook is said by `export` and docs/export.md.
    for policy, left in FORM_GAPS.items():
        assert policy in forms and f"{policy}: {left}" in exported.notes
        assert f"| `{policy}` |" in page, policy


def test_params_are_typed_as_the_engine_types_them_and_any_yaml_value_is_written(tmp_path):
    folder = write(tmp_path, policy(params={"names": ["a"], "limit": float("inf")},
                                    validations=[{"expression": "params.limit > 1.0"}]))
    [(vap, _)] = pairs(export(load(folder)).objects).values()
    [variable] = vap["spec"]["variables"]
    assert variable["expression"] == \
        "dyn({\"limit\": dyn(double('Infinity')), \"names\": dyn([\"a\"])})"


@pytest.mark.parametrize("expression", sorted(REFUSED))
def test_what_kubernetes_cel_does_not_compile_is_refused_at_load(tmp_path, expression):
    """The engine's CEL is Kubernetes' own: what the API server would refuse (an extension
    function, a type mix) no longer loads, with the API server's message (before, the engine
    ran it and only `export` refused it)."""
    folder = write(tmp_path, policy("ours", validations=[
        {"expression": "true"}, {"expression": expression}]))
    with pytest.raises(PolicyError) as refused:
        load(folder)
    assert "validations[1].expression: " in str(refused.value)
    assert REFUSED[expression] in str(refused.value)


@pytest.mark.parametrize("expression", ACCEPTED)
def test_cel_kubernetes_compiles_is_exported(tmp_path, expression):
    folder = write(tmp_path, policy("both", validations=[{"expression": expression}]))
    exported = export(load(folder))
    assert not exported.refusals and len(exported.objects) == 2


@pytest.mark.parametrize(("variable", "expression"), sorted(REFUSED_WITH_VARIABLE))
def test_a_variable_is_typed_as_kubernetes_types_it(tmp_path, variable, expression):
    """Each variable is typed by its expression, as the API server types it: a misuse does
    not load."""
    folder = write(tmp_path, policy("ours", variables=[{"name": "v", "expression": variable}],
                                    validations=[{"expression": expression}]))
    with pytest.raises(PolicyError) as refused:
        load(folder)
    assert "validations[0].expression: " in str(refused.value)
    assert REFUSED_WITH_VARIABLE[variable, expression] in str(refused.value)


@pytest.mark.parametrize(("variable", "expression"), ACCEPTED_WITH_VARIABLE)
def test_a_variable_used_as_its_type_allows_is_exported(tmp_path, variable, expression):
    folder = write(tmp_path, policy("both", variables=[{"name": "v", "expression": variable}],
                                    validations=[{"expression": expression}]))
    exported = export(load(folder))
    assert not exported.refusals and len(exported.objects) == 2


def test_every_expression_of_a_policy_is_held_to_kubernetes_cel(tmp_path):
    """Variables, matchConditions and messageExpressions compile in Kubernetes' CEL when the
    policy loads: `check` and `export` both refuse what the API server would."""
    cases = {"ours": policy("ours", variables=[{"name": "num", "expression": "math.abs(-1)"}]),
             "cond": policy("cond", matchConditions=[
                 {"name": "c", "expression": "cel.bind(x, 1, x > 0)"}]),
             "message": policy("message", validations=[
                 {"expression": "true", "messageExpression": "base64.encode(b'a')"}])}
    for name, document in cases.items():
        (tmp_path / name).mkdir()
        folder = write(tmp_path / name, document)
        with pytest.raises(PolicyError, match=r"undeclared reference to '(math|cel|base64)'"):
            load(folder)
        done = subprocess.run([sys.executable, "-m", "webhook.cli", "export", "--format",
                               "vap", "--policies", str(folder)], capture_output=True,
                              text=True, cwd=ROOT, check=False)
        assert done.returncode == 2 and "undeclared reference to" in done.stderr
        assert "Traceback" not in done.stderr
