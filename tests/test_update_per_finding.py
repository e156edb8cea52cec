"""On UPDATE a violation counts as already there only when the old object had the same
finding (policy, container, field or env name) with the same offending value: a new one
beside an old one, or a new value in the old one's field, is denied."""

from __future__ import annotations

import copy
from typing import Any

from builders import container, judge, pod

from webhook import Review, decode

DB = {"name": "DB_PASSWORD", "value": "literal-1"}
GITHUB = {"name": "GITHUB_TOKEN", "value": "literal-2"}
AWS = {"name": "AWS_SECRET_ACCESS_KEY", "value": "literal-3"}
LOG = {"name": "LOG_LEVEL", "value": "info"}


def env_pod(*entries: dict[str, Any], name: str = "app") -> dict[str, Any]:
    return pod(container(name, env=list(entries)))


def test_new_secrets_beside_one_already_there_are_denied_as_on_create() -> None:
    old = env_pod(DB)
    new = env_pod(DB, GITHUB, AWS)
    assert not judge(new).allowed
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "env GITHUB_TOKEN holds a literal value" in decision.message
    assert "env AWS_SECRET_ACCESS_KEY holds a literal value" in decision.message
    assert "DB_PASSWORD" not in decision.message  # the old one is only warned about
    assert any("DB_PASSWORD" in w and "already violated" in w for w in decision.warnings)


def test_the_same_secret_moved_to_another_index_is_still_the_old_finding() -> None:
    decision = judge(env_pod(LOG, GITHUB, DB),
                     review=Review(operation="UPDATE", old_object=decode(env_pod(DB, GITHUB))))
    assert decision.allowed, decision.message
    assert len([w for w in decision.warnings if "already violated" in w]) == 2


def test_an_unchanged_violation_is_only_warned_about() -> None:
    obj = env_pod(DB, GITHUB)
    decision = judge(obj, review=Review(operation="UPDATE", old_object=decode(copy.deepcopy(obj))))
    assert decision.allowed


def test_a_new_violation_of_another_field_by_the_same_policy_is_denied() -> None:
    old = pod({"name": "app", "image": "registry.example.com/app:1.0",
               "resources": {"requests": {"memory": "128Mi"}}})
    new = pod({"name": "app", "image": "registry.example.com/app:1.0", "resources": {}})
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "[require-requests] container 'app': add resources.requests.memory" in \
        decision.message
    assert "requests.cpu" not in decision.message
    assert any("requests.cpu" in w and "already violated" in w for w in decision.warnings)


def test_the_same_secret_in_another_container_is_new() -> None:
    old = pod(container("app", env=[DB]), container("sidecar"))
    new = pod(container("app", env=[DB]), container("sidecar", env=[DB]))
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "container 'sidecar': env DB_PASSWORD" in decision.message
    assert "container 'app'" not in decision.message


TWO_CHECKS = [
    {"id": "no-extra-labels", "description": "labels a and b are reserved", "type": "validate",
     "action": "enforce", "scope": "object",
     "validations": [
         {"expression": "!has(object.metadata.labels) || !('a' in object.metadata.labels)",
          "message": "remove the label a"},
         {"expression": "!has(object.metadata.labels) || !('b' in object.metadata.labels)",
          "message": "remove the label b"}]},
    {"id": "no-reserved-env", "description": "X and Y are reserved", "type": "validate",
     "action": "enforce", "scope": "container",
     "validations": [
         {"expression": "!has(container.env) || container.env.all(e, e.name != 'X')",
          "message": "remove env X"},
         {"expression": "!has(container.env) || container.env.all(e, e.name != 'Y')",
          "message": "remove env Y"}]}]


def test_a_new_failure_of_another_validation_of_a_cel_policy_is_denied(tmp_path: Any) -> None:
    """A CEL policy's validations without a fieldPath all point at the object (or the
    container): which validation failed is part of the finding, so the old object failing
    the first does not excuse a new failure of the second."""
    from builders import policies_in

    from webhook import evaluate

    policies = policies_in(tmp_path, *TWO_CHECKS)
    old = pod(container("app", env=[{"name": "X", "value": "1"}]))
    old["metadata"]["labels"] = {"a": "1"}
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["b"] = "1"
    new["spec"]["containers"][0]["env"].append({"name": "Y", "value": "1"})
    decision = evaluate(decode(new), policies, Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "[no-extra-labels] remove the label b" in decision.message
    assert "container 'app': remove env Y" in decision.message
    assert "remove the label a" not in decision.message and "remove env X" not in \
        decision.message
    assert len([w for w in decision.warnings if "already violated" in w]) == 2
    unchanged = evaluate(decode(new),
                         policies,
                         Review(operation="UPDATE", old_object=decode(copy.deepcopy(new))))
    assert unchanged.allowed, unchanged.message


def test_a_new_latest_image_in_a_field_that_had_one_is_denied() -> None:
    """`kubectl set image pod/pre app=attacker/miner:latest` on a pod that predates the policy:
    the field broke the policy before, but with another value."""
    old = pod(container("app", image="registry.example.com/app:latest"))
    new = pod(container("app", image="attacker/miner:latest"))
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "[disallow-latest-tag] container 'app': image 'attacker/miner:latest'" in \
        decision.message
    assert not any("already violated" in w for w in decision.warnings)


def test_a_new_literal_value_of_a_secret_variable_is_denied_and_never_shown() -> None:
    old = env_pod(DB)
    new = env_pod({"name": "DB_PASSWORD", "value": "a-new-literal-9"})
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert not decision.allowed
    assert "env DB_PASSWORD holds a literal value" in decision.message
    said = " ".join([decision.message, *decision.warnings])
    assert "a-new-literal-9" not in said and "literal-1" not in said


def test_the_same_old_value_still_passes_with_a_warning() -> None:
    old = pod(container("app", image="registry.example.com/app:latest", env=[DB]))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"team": "ml"}
    new["spec"]["containers"][0]["env"].insert(0, LOG)  # the old secret moves to env[1]
    decision = judge(new, review=Review(operation="UPDATE", old_object=decode(old)))
    assert decision.allowed, decision.message
    warned = [w for w in decision.warnings if "already violated" in w]
    assert any(w.startswith("[disallow-latest-tag]") for w in warned)
    assert any(w.startswith("[no-plaintext-secrets]") and "DB_PASSWORD" in w for w in warned)


def test_a_finding_key_holds_a_digest_never_the_value() -> None:
    from webhook.engine.evaluate import _finding_key
    from webhook.engine.results import Finding

    obj = env_pod(DB)
    at = ("spec", "containers", 0, "env", 0, "value")
    key = _finding_key("no-plaintext-secrets", Finding("env DB_PASSWORD", at, "app"), obj)
    assert "literal-1" not in repr(key)
    other = env_pod({"name": "DB_PASSWORD", "value": "literal-2"})
    assert key != _finding_key("no-plaintext-secrets", Finding("env DB_PASSWORD", at, "app"),
                               other)
