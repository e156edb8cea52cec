"""`quickq-guard export --format map|native`: mutate policies as MutatingAdmissionPolicies.

The objects have the shape of admissionregistration.k8s.io/v1 in Kubernetes 1.36; Pods are
patched on CREATE only, the config's exclusions and the policy's match become the binding's
and the policy's own fields; what a MutatingAdmissionPolicy cannot do is refused with the
reason and exit 1. tests/cluster/test_native_mutations.py shows on a real API server that the
objects stored after these policies equal those stored after the webhook's patches.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from webhook import Config, load_policies
from webhook.engine.policy import PolicyError, PolicySet
from webhook.export.map import export

ROOT = Path(__file__).resolve().parent.parent
USER_POLICIES = Path(__file__).resolve().parent / "map_policies"
LABEL = "!has(object.metadata.labels) ? [JSONPatch{op: 'add', path: '/metadata/labels', " \
        "value: {'a': 'b'}}] : []"


def load(folder: Path, **config: Any) -> PolicySet:
    return load_policies(folder, Config.model_validate(config))


def mutate(id: str = "m", **fields: Any) -> dict[str, Any]:
    return {"id": id, "description": "d", "type": "mutate", "action": "enforce",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": LABEL}}],
            **fields}


def write(tmp_path: Path, *documents: dict[str, Any]) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    for document in documents:
        (folder / f"{document['id']}.yaml").write_text(yaml.safe_dump(document))
    return folder


def by_policy(objects: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    out = {}
    for policy, binding in zip(objects[::2], objects[1::2], strict=True):
        assert (policy["kind"], binding["kind"]) == ("MutatingAdmissionPolicy",
                                                      "MutatingAdmissionPolicyBinding")
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        out[policy["metadata"]["annotations"]["quickq.io/policy"]] = (policy, binding)
    return out


def test_the_default_mutations_and_user_cel_mutations_have_the_kubernetes_shape():
    for folder in (ROOT / "policies", USER_POLICIES):
        exported = export(load(folder, excludeUsers=["system:serviceaccount:ci:*"]))
        assert exported.refusals == []
        assert exported.objects
        for obj in exported.objects:
            assert obj["apiVersion"] == "admissionregistration.k8s.io/v1"
            kubernetes_validate.validate(obj, "1.36.0", strict=True)
    defaults = by_policy(export(load(ROOT / "policies")).objects)
    assert sorted(defaults) == ["inject-gpu-toleration", "inject-startup-probe"]
    for policy, _ in defaults.values():
        assert policy["spec"]["reinvocationPolicy"] == "IfNeeded"
        assert policy["spec"]["failurePolicy"] == "Fail"
        # The built-in mutations patch NodeTemplates too, on CREATE and UPDATE, as the webhook.
        assert {"apiGroups": ["quickq", "quickq.io"], "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"], "resources": ["nodetemplates"]} \
            in policy["spec"]["matchConstraints"]["resourceRules"]


def test_pods_are_patched_on_create_only_and_controllers_on_the_policys_operations(tmp_path):
    [(policy, _)] = by_policy(export(load(write(tmp_path, mutate()))).objects).values()
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"]} in rules
    apps = next(rule for rule in rules if rule["apiGroups"] == ["apps"])
    assert apps["operations"] == ["CREATE", "UPDATE"]
    names = [condition["name"] for condition in policy["spec"]["matchConditions"]]
    assert names == ["quickq-guard-not-mirror-pod", "quickq-guard-template-changed",
                     "quickq-guard-not-deployment-replicaset"]


def test_exclusions_and_match_become_the_bindings_and_the_policys_fields(tmp_path):
    folder = write(tmp_path, mutate(match={"kinds": ["Pod", "Deployment"],
                                           "namespaces": ["team-*", "ml"],
                                           "selector": {"matchLabels": {"tier": "gpu"}}}))
    policies = load(folder, excludeNamespaces=["kube-system", "sandbox-*"],
                    excludeUsers=["system:serviceaccount:ci:*"], excludeGroups=["ops"])
    [(policy, binding)] = by_policy(export(policies).objects).values()
    assert binding["spec"]["matchResources"] == {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]}}
    spec = policy["spec"]
    assert spec["matchConstraints"]["objectSelector"] == {"matchLabels": {"tier": "gpu"}}
    assert [rule["resources"] for rule in spec["matchConstraints"]["resourceRules"]] \
        == [["pods"], ["deployments"]]
    conditions = {c["name"]: c["expression"] for c in spec["matchConditions"]}
    assert "request.namespace.matches(\"^(?s:team\\\\-.*)$\")" \
        in conditions["quickq-guard-namespaces"]
    assert "sandbox" in conditions["quickq-guard-exclude-namespaces"]
    assert "request.userInfo.username" in conditions["quickq-guard-exclude-users"]
    assert "request.userInfo.groups" in conditions["quickq-guard-exclude-groups"]


def test_user_mutations_keep_their_jsonpatch_literals_and_params(tmp_path):
    [(policy, _)] = by_policy(export(load(USER_POLICIES)).objects[2:]).values()
    assert policy["metadata"]["name"] == "quickq-guard-default-team-label"
    [mutation] = policy["spec"]["mutations"]
    assert "JSONPatch{op: \"add\"" in mutation["jsonPatch"]["expression"]
    assert "variables.params.team" in mutation["jsonPatch"]["expression"]
    assert {"name": "params", "expression": "dyn({\"team\": \"unassigned\"})"} \
        in policy["spec"]["variables"]


def test_what_a_mutating_admission_policy_cannot_do_is_refused_with_the_reason(tmp_path):
    folder = write(tmp_path, mutate("warns", action="warn"), mutate("contained", scope="container",
                   mutations=[{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                       "has(container.securityContext) ? [] : [JSONPatch{op: 'add', "
                       "path: '/securityContext', value: {'runAsNonRoot': true}}]")}}]),
                   mutate("crds-only", match={"kinds": ["NodeTemplate"]}), mutate("ok"))
    exported = export(load(folder))
    reasons = {refusal.policy: refusal.reason for refusal in exported.refusals}
    assert sorted(reasons) == ["contained", "crds-only", "warns"]
    assert "action warn only reports the patch" in reasons["warns"]
    assert "scope: container" in reasons["contained"]
    assert "NodeTemplate" in reasons["crds-only"]
    assert not any(refusal.expected for refusal in exported.refusals)
    assert list(by_policy(exported.objects)) == ["ok"]
    dry_run = export(load(folder, mode="dry-run"))
    assert dry_run.objects == [] and "dry-run mode" in dry_run.refusals[0].reason


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", "export", *args],
                          capture_output=True, text=True, cwd=ROOT, check=False)


def test_the_command_exports_both_kinds_and_exits_1_naming_a_refused_policy(tmp_path):
    done = cli("--format", "native")
    assert done.returncode == 0, done.stderr
    kinds = [doc["kind"] for doc in yaml.safe_load_all(done.stdout)]
    assert kinds.count("MutatingAdmissionPolicy") == 2
    # the CEL forms (policies/cel-forms/) of the validate policies in force as shipped: all
    # but require-kueue-queue, which is off
    assert kinds.count("ValidatingAdmissionPolicy") == 8
    assert "exported 10 policies" in done.stderr
    folder = write(tmp_path, mutate("warns", action="warn"))
    refused = cli("--format", "map", "--policies", str(folder))
    assert refused.returncode == 1
    assert "warns: not exported: action warn only reports the patch" in refused.stderr
    assert cli("--format", "vap", "--policies", str(folder)).returncode == 0


def test_policies_are_refused_where_policy_exceptions_are_honoured(tmp_path):
    """A native policy cannot read PolicyExceptions: exported, it would deny what the webhook
    lets through, so neither kind is exported and the command says why (exit 1)."""
    folder = write(tmp_path, mutate("m"), {"id": "v", "description": "d", "type": "validate",
                                           "action": "enforce",
                                           "validations": [{"expression": "true"}]})
    config = tmp_path / "config.yaml"
    config.write_text("exceptionNamespaces: [platform]\n")
    done = cli("--format", "native", "--policies", str(folder), "--config", str(config))
    assert done.returncode == 1 and [d for d in yaml.safe_load_all(done.stdout) if d] == []
    for policy in ("m", "v"):
        assert f"# {policy}: not exported: PolicyExceptions are honoured" in done.stdout
        assert (f"{policy}: not exported: PolicyExceptions are honoured from platform"
                in done.stderr)


def test_a_mutation_kubernetes_cel_does_not_compile_is_refused_naming_it(tmp_path):
    """Mutations compile as the mutating plugin compiles them, when the policy loads: plain
    maps for JSONPatch and functions Kubernetes lacks are refused there, with the API
    server's messages (before, the engine ran them and only `export` refused them)."""
    def patch(expression: str) -> list[dict[str, Any]]:
        return [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]

    refused = {
        "maps": ("[{'op': 'add', 'path': '/metadata/labels', 'value': {'a': 'b'}}]",
                 "expected type 'string' but found 'map(string, string)'"),
        "ours": ("[JSONPatch{op: 'add', path: '/metadata/labels', value: "
                 "{'n': string(math.abs(-1))}}]", "undeclared reference to 'math'"),
        "removes": ("[{'op': 'remove', 'path': '/metadata/labels'}]",
                    "must evaluate to list(JSONPatch) but got list(map(string, string))"),
    }
    for name, (expression, said) in refused.items():
        (tmp_path / name).mkdir()
        with pytest.raises(PolicyError) as error:
            load(write(tmp_path / name, mutate(name, mutations=patch(expression))))
        assert "mutations[0].jsonPatch.expression: " in str(error.value)
        assert said in str(error.value)
    folder = write(tmp_path, mutate("escaped", mutations=patch(
        "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), "
        "value: 'x'}]")))
    assert not export(load(folder)).refusals
