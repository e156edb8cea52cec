"""Loading policies and the global config: every mistake fails loudly, naming file, field and
reason; overrides of action and params work."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from builders import container, judge, pod, result

from webhook import Config, PolicyError, Review, decode, load_config, load_policies
from webhook.loader import default_policies_dir

DEFAULT_IDS = [
    "disallow-latest-tag", "disallow-root-user", "gpu-claim-usage", "gpu-priority-class",
    "gpu-resource-claims", "inject-gpu-toleration",
    "inject-startup-probe", "liveness-probe-tolerance", "no-plaintext-secrets",
    "require-gpu-limits", "require-kueue-queue", "require-labels", "require-requests",
    "valid-resource-quantities",
]
EXPECTED = {
    "require-requests": ("validate", "enforce"),
    "disallow-latest-tag": ("validate", "enforce"),
    "disallow-root-user": ("validate", "enforce"),
    "require-gpu-limits": ("validate", "enforce"),
    "valid-resource-quantities": ("validate", "enforce"),
    "no-plaintext-secrets": ("validate", "enforce"),
    "liveness-probe-tolerance": ("validate", "warn"),
    "gpu-priority-class": ("validate", "audit"),
    "gpu-resource-claims": ("validate", "enforce"),
    "gpu-claim-usage": ("validate", "warn"),
    "require-kueue-queue": ("validate", "off"),
    "require-labels": ("validate", "audit"),
    "inject-startup-probe": ("mutate", "enforce"),
    "inject-gpu-toleration": ("mutate", "enforce"),
}


def test_the_default_policies_have_the_documented_ids_types_and_actions(policies):
    assert [p.id for p in policies.policies] == DEFAULT_IDS
    assert {p.id: (p.type, p.action) for p in policies.policies} == EXPECTED
    assert policies.config == Config()
    assert policies.config.excludeNamespaces == ("kube-system", "kube-public", "kube-node-lease")


def test_each_default_policy_file_is_named_after_its_id():
    for path in default_policies_dir().glob("*.yaml"):
        assert load_policies_from({path.name: path.read_text()}).policies[0].id == path.stem


def load_policies_from(files: dict[str, str], config=None, tmp=None):
    import tempfile

    directory = Path(tmp or tempfile.mkdtemp())
    for name, text in files.items():
        (directory / name).write_text(textwrap.dedent(text))
    return load_policies(directory, config)


GOOD = textwrap.dedent("""\
    id: pin-images
    description: Images are pinned.
    type: validate
    action: enforce
    rule: disallow-latest-tag
    """)


def write(tmp_path: Path, text: str, name: str = "policy.yaml") -> Path:
    (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path / name


def load_error(tmp_path: Path, text: str, config=None) -> str:
    write(tmp_path, text)
    with pytest.raises(PolicyError) as raised:
        load_policies(tmp_path, config)
    return str(raised.value)


def test_a_custom_policy_reuses_a_rule_under_its_own_id(tmp_path):
    write(tmp_path, GOOD)
    policies = load_policies(tmp_path)
    decision = judge(pod(container(image="app:latest")), policies)
    assert [r.policy for r in decision.results] == ["pin-images"]
    assert not decision.allowed


@pytest.mark.parametrize(("change", "expected"), [
    ("acton: enforce", "policy.yaml: acton: unknown field"),
    ("match: {kind: [Pod]}", "policy.yaml: match.kind: unknown field"),
    ("match: {kinds: Pod}", "policy.yaml: match.kinds: Input should be a valid tuple"),
    ("match: {operations: [DELETE]}", "policy.yaml: match.operations.0: Input should be"),
    ("params: {nope: 1}", "policy.yaml: params: nope: unknown field"),
    ("message: [a]", "policy.yaml: message: Input should be a valid string"),
])
def test_unknown_or_wrongly_typed_fields_fail_naming_file_and_field(tmp_path, change, expected):
    message = load_error(tmp_path, GOOD + change + "\n")
    assert str(tmp_path) in message
    assert expected in message


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("action: enforce", "action: deny", "action: Input should be 'enforce', 'warn', 'audit' or "
     "'off'"),
    ("action: enforce", "action: 5", "action: Input should be"),
    ("type: validate", "type: mutate", "type: rule 'disallow-latest-tag' is a validate rule, "
     "not mutate"),
    ("rule: disallow-latest-tag", "rule: disallow-latest-tags",
     "rule: unknown rule 'disallow-latest-tags' (known: disallow-latest-tag,"),
    ("id: pin-images", "id: Pin_Images", "id: String should match pattern"),
    ("description: Images are pinned.", "description: ''", "description: String should have"),
])
def test_wrong_values_fail_naming_the_field_and_reason(tmp_path, old, new, expected):
    message = load_error(tmp_path, GOOD.replace(old, new))
    assert message.startswith(f"{tmp_path / 'policy.yaml'}: ")
    assert expected in message


def test_a_missing_required_field_is_named(tmp_path):
    message = load_error(tmp_path, GOOD.replace("type: validate\n", ""))
    assert "policy.yaml: type: Field required" in message


def test_wrongly_typed_params_fail(tmp_path):
    message = load_error(tmp_path, """\
        id: probes
        description: d
        type: validate
        action: warn
        rule: liveness-probe-tolerance
        params: {minSeconds: soon}
        """)
    assert "policy.yaml: params: minSeconds: Input should be a valid integer" in message


def test_a_yaml_error_in_a_policy_names_file_and_line(tmp_path):
    message = load_error(tmp_path, "id: [unclosed\n")
    assert message.startswith(f"{tmp_path / 'policy.yaml'}: invalid YAML: ")
    assert "line 2" in message


def test_a_policy_that_is_not_a_mapping_fails(tmp_path):
    assert "expected a policy (a mapping), got list" in load_error(tmp_path, "- a\n")


def test_duplicate_policy_ids_fail(tmp_path):
    write(tmp_path, GOOD, "a.yaml")
    message = load_error(tmp_path, GOOD)
    assert "policy id 'pin-images' is already defined in" in message


def test_an_empty_policy_directory_fails(tmp_path):
    with pytest.raises(PolicyError, match="no policies found"):
        load_policies(tmp_path)
    with pytest.raises(PolicyError, match="no such policy file or directory"):
        load_policies(tmp_path / "missing")


def test_a_second_document_in_a_policy_file_is_named_by_number(tmp_path):
    message = load_error(tmp_path, GOOD + "---\nid: other\n")
    assert "policy.yaml: document 2: " in message


# --- the global config ----------------------------------------------------------------------


def test_config_override_of_an_unknown_policy_id_fails_naming_it():
    with pytest.raises(PolicyError) as raised:
        load_policies(None, Config.model_validate({"policies": {"require-label": {}}}))
    assert "config: policies: no policy with id 'require-label'" in str(raised.value)


def test_config_file_typo_fails_naming_file_and_field(tmp_path):
    path = write(tmp_path, "mdoe: dry-run\n", "config.yaml")
    with pytest.raises(PolicyError) as raised:
        load_config(path)
    assert str(raised.value) == f"{path}: mdoe: unknown field"


@pytest.mark.parametrize(("text", "expected"), [
    ("mode: audit\n", "mode: Input should be 'enforce' or 'dry-run'"),
    ("excludeNamespaces: kube-system\n", "excludeNamespaces: Input should be a valid tuple"),
    ("policies: {require-labels: {acton: off}}\n",
     "policies.require-labels.acton: unknown field"),
    ("nodeTemplateGroups: ['']\n", "nodeTemplateGroups: a NodeTemplate group"),
    ("a: 1\n---\nb: 2\n", "expected one config document, found 2"),
])
def test_config_mistakes_fail_naming_the_field(tmp_path, text, expected):
    path = write(tmp_path, text, "config.yaml")
    with pytest.raises(PolicyError) as raised:
        load_config(path)
    assert expected in str(raised.value)


def test_config_params_typo_names_the_config_not_the_policy_file():
    config = Config.model_validate(
        {"policies": {"liveness-probe-tolerance": {"params": {"minSecond": 90}}}})
    with pytest.raises(PolicyError) as raised:
        load_policies(None, config)
    assert str(raised.value) == (
        "config: policies.liveness-probe-tolerance.params: minSecond: unknown field")


def test_config_overrides_action_and_params(tmp_path):
    path = write(tmp_path, """\
        policies:
          liveness-probe-tolerance:
            action: enforce
            params: {minSeconds: 120}
          require-labels:
            params: {labels: [team]}
        """, "config.yaml")
    policies = load_policies(None, load_config(path))
    obj = pod(container(livenessProbe={"tcpSocket": {"port": 1}, "failureThreshold": 6}),
              labels={"app": "x"})
    decision = judge(obj, policies)
    assert not decision.allowed
    assert "raise livenessProbe.failureThreshold to 12 or more (>= 120s)" in decision.message
    assert result(decision, "require-labels").findings[0].path == "metadata.labels.team"
    assert policies.get("liveness-probe-tolerance").action == "enforce"


def test_an_empty_config_file_is_the_default_config(tmp_path):
    assert load_config(write(tmp_path, "", "config.yaml")) == Config()


# --- match ----------------------------------------------------------------------------------


def test_match_kinds_namespaces_operations_and_selector(tmp_path):
    write(tmp_path, GOOD + textwrap.dedent("""\
        match:
          kinds: [Pod]
          namespaces: [ml-*]
          excludeNamespaces: [ml-sandbox]
          operations: [CREATE]
          selector:
            matchLabels: {tier: prod}
            matchExpressions:
              - {key: legacy, operator: DoesNotExist}
        """))
    policies = load_policies(tmp_path)

    def status(obj, review=None):
        return result(judge(obj, policies, review), "pin-images").status

    def bad(namespace="ml-a", **labels):
        return pod(container(image="app:latest"), namespace=namespace,
                   labels={"tier": "prod", **labels})

    assert status(bad()) == "fail"
    assert status(bad("default")) == "skip"
    assert status(bad("ml-sandbox")) == "skip"
    assert status(bad(), Review(operation="UPDATE", old_object=decode(bad()))) == "skip"
    assert status(bad(tier="dev")) == "skip"
    assert status(bad(legacy="yes")) == "skip"
    from builders import workload
    assert status(workload("Deployment", container(image="app:latest"), namespace="ml-a",
                           labels={"tier": "prod"})) == "skip"


def test_shipped_policies_load_from_a_copy_of_the_directory(tmp_path):
    shutil.copytree(default_policies_dir(), tmp_path / "p")
    assert [p.id for p in load_policies(tmp_path / "p").policies] == DEFAULT_IDS


def test_a_duplicate_key_in_a_policy_is_an_error_naming_file_and_line(tmp_path):
    """Read as manifests are (kubectl refuses a duplicate key): the second `action:` must not
    silently win over the first."""
    message = load_error(tmp_path, "id: p\ndescription: d\ntype: validate\naction: enforce\n"
                                   "rule: disallow-latest-tag\naction: audit\n")
    assert message.startswith(f"{tmp_path / 'policy.yaml'}: invalid YAML: ")
    assert "key 'action' is already defined" in message and "line 6" in message
