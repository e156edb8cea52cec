"""No env value of the object, and no value under a key that names a secret, appears in any
output, whatever a policy's messageExpression does with it: the webhook's answers (denials,
warnings, audit annotations), its log and metrics, and every report format of `check`.
Values are planted in the object; policies try to show them; every output is searched."""

from __future__ import annotations

import base64
import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from server_helpers import Server, pod, review

from webhook import Review, decode, evaluate, load_policies

SECRET = "Vx7-planted-env-value-q3"
ANNOTATION_SECRET = "Hb2-planted-annotation-k9"
SHORT = "k2z"  # a short value, still never shown
PLANTED = (SECRET, ANNOTATION_SECRET, SHORT)
ENV = [{"name": "DB_PASSWORD", "value": SECRET}, {"name": "LOG_LEVEL", "value": SECRET},
       {"name": "SHORT", "value": SHORT}]


def _policy(policy_id: str, action: str, scope: str, message_expression: str,
            expression: str = "false") -> dict[str, Any]:
    return {"id": policy_id, "description": "tries to show a value", "type": "validate",
            "action": action, "scope": scope,
            "validations": [{"expression": expression, "message": "a value was read",
                             "messageExpression": message_expression}]}


JOINED = "'values: ' + container.env.map(e, e.value).join(', ')"
POLICIES = [
    _policy("shows-env", "enforce", "container", JOINED),
    _policy("shows-env-warn", "warn", "container", JOINED),
    _policy("shows-env-audit", "audit", "container", JOINED),
    _policy("shows-env-encoded", "enforce", "container",
            # Kubernetes' CEL has no base64 or reverse(): a value through bytes and back, and
            # a cut of it
            "'bytes ' + string(bytes(container.env[0].value)) + ' cut ' "
            "+ container.env[0].value.substring(3)"),
    _policy("shows-pod-env", "enforce", "container",
            "podSpec.containers.map(c, c.env.map(e, e.value).join('/')).join(' ')"),
    _policy("shows-object", "warn", "object",
            "object.metadata.annotations['db-password'] + ' ' + "
            "object.spec.containers[0].env[1].value + ' ' + "
            "string(object.metadata.annotations)"),
    _policy("shows-old-object", "audit", "object",
            "oldObject == null ? 'none' : string(oldObject.spec.containers[0].env[0].value)"),
    # Errors quote what a function was given: an IP address that is not one.
    _policy("fails-on-env", "enforce", "container", "'x'",
            expression="ip(container.env[0].value).family() == 4"),
    _policy("fails-on-url", "warn", "container", "'x'",
            expression="url(container.env[1].value).getHost() == ''"),
]


def _object() -> dict[str, Any]:
    obj = pod(annotations={"db-password": ANNOTATION_SECRET, "team": "a"})
    obj["spec"]["containers"][0]["env"] = copy.deepcopy(ENV)
    return obj


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("leaky-policies")
    (out / "leaky.yaml").write_text(yaml.safe_dump_all(POLICIES))
    return out


def _leaks(text: str) -> list[str]:
    found = [value for value in PLANTED[:2] if value in text or value[::-1] in text
             or base64.b64encode(value.encode()).decode()[:12] in text or value[3:] in text]
    if f" {SHORT}" in text or f"{SHORT}/" in text or f"{SHORT}," in text:
        found.append(SHORT)
    return found


def test_no_value_in_the_engine_s_decision(folder: Path) -> None:
    policies = load_policies(folder)
    for request in (Review(), Review(operation="UPDATE", old_object=decode(_object()))):
        decision = evaluate(decode(_object()), policies, request)
        said = "\n".join([decision.message, *decision.warnings,
                          *decision.audit_annotations.values(),
                          *(r.reason for r in decision.results),
                          *(f.message for r in decision.results for f in r.findings)])
        assert "values: (hidden), (hidden), (hidden)" in said  # the expression ran
        assert "unable to parse IP" in said  # and the failing ones failed (the API server's words)
        assert _leaks(said) == []


def test_no_value_in_any_webhook_answer_log_or_metric(folder: Path, certs_dir: Path,
                                                      tmp_path: Path) -> None:
    server = Server(tmp_path, certs_dir, "--policies", str(folder))
    texts = []
    try:
        with server.client() as client:
            for body in (review(_object()),
                         review(_object(), operation="UPDATE", old=_object())):
                for path in ("/validate", "/mutate"):
                    answer = client.post(path, json=body)
                    assert answer.status_code == 200
                    texts.append(answer.text)
            texts.append(client.get("/metrics").text)
    finally:
        assert server.stop() == 0
    texts += [server.log_path.read_text(), server.err_path.read_text()]
    joined = "\n".join(texts)
    assert "values: (hidden)" in joined and "shows-env-audit" in joined
    assert _leaks(joined) == []


@pytest.mark.parametrize("output", ["table", "json", "sarif", "junit", "github",
                                    "policyreport", "html"])
def test_no_value_in_any_check_report(folder: Path, tmp_path: Path, output: str) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(_object()))
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--no-default-policies",
                           "--policies", str(folder), "--output", output, "--fail-on", "audit",
                           str(manifest)], capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.returncode in (1, 2), done.stderr  # 2: the failing expressions are errors
    joined = done.stdout + done.stderr
    assert "shows-env" in joined
    assert _leaks(joined) == []


@pytest.mark.parametrize("output", ["table", "json", "junit", "github"])
def test_no_value_in_any_test_suite_report(folder: Path, tmp_path: Path, output: str) -> None:
    """A suite whose expected resource differs from the judged one is told what the result
    would need: env values and secret-keyed values in that difference read (hidden)."""
    obj = _object()
    expected = copy.deepcopy(obj)
    expected["spec"]["containers"].append(dict(copy.deepcopy(obj["spec"]["containers"][0]),
                                               name="copy"))
    expected["metadata"]["annotations"]["api-token"] = ANNOTATION_SECRET
    expected["spec"]["containers"][0]["env"][2]["value"] = SECRET
    suite = tmp_path / "suite.yaml"
    suite.write_text(yaml.safe_dump({
        "apiVersion": "quickq.io/v1", "kind": "PolicyTest", "name": "leaky",
        "policyDir": str(folder), "policies": ["shows-env", "shows-object"],
        "resources": [{"object": obj}],
        "cases": [{"resource": "web", "policy": "shows-env", "result": "pass",
                   "patched": expected}]}))
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "test", "--output", output,
                           str(suite)], capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.returncode == 1, done.stderr
    joined = done.stdout + done.stderr
    assert "patched: differs" in joined and "(hidden)" in joined
    assert "DB_PASSWORD" in joined and "/metadata/annotations/api-token" in joined
    assert _leaks(joined) == []


def test_the_search_would_find_a_leak() -> None:
    """Sanity: each way of showing a value above is one the search recognises."""
    assert _leaks(f"values: {SECRET}") == [SECRET]
    assert _leaks(base64.b64encode(SECRET.encode()).decode()) == [SECRET]
    assert _leaks(SECRET[::-1]) == [SECRET] and _leaks(SECRET[3:]) == [SECRET]
    assert _leaks(f"values: {SHORT}, x") == [SHORT]


def test_a_mutation_path_built_from_a_value_does_not_show_it(tmp_path: Path) -> None:
    (tmp_path / "mutate.yaml").write_text(yaml.safe_dump({
        "id": "label-from-env", "description": "copies a value into a label",
        "type": "mutate", "action": "enforce", "scope": "object",
        "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
            "[JSONPatch{op: 'add', path: '/metadata/annotations/' + "
            "object.spec.containers[0].env[0].value, value: 'x'}]")}}]}))
    decision = evaluate(decode(_object()), load_policies(tmp_path), Review(operation="CREATE"))
    [result] = decision.results
    assert result.status == "patch"
    [found] = result.findings
    assert "(hidden)" in found.message and _leaks(found.message + found.path) == []
    # the patch itself is what the policy asked for, and goes to the API server only
    assert decision.patch[0]["path"].endswith(SECRET)


COPIES_ENV = {"id": "copies-env", "description": "copies an env value into an annotation",
              "type": "mutate", "action": "enforce", "scope": "object",
              "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                  "[JSONPatch{op: 'add', path: '/metadata/annotations/copied', "
                  "value: object.spec.containers[0].env[0].value}]")}}]}


@pytest.mark.parametrize("output", ["table", "json", "sarif", "junit", "github",
                                    "policyreport", "html"])
def test_a_patch_that_carries_a_value_is_shown_without_it(tmp_path: Path, output: str) -> None:
    """A CEL mutation may copy a value into the object: the patch goes to the API server as
    the policy asks (the webhook's answer), but a report shows it with the value hidden."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "copies.yaml").write_text(yaml.safe_dump(COPIES_ENV))
    decision = evaluate(decode(_object()), load_policies(folder), Review(operation="CREATE"))
    assert decision.patch[0]["value"] == SECRET  # what the API server gets
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(_object()))
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--no-default-policies",
                           "--policies", str(folder), "--output", output, str(manifest)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    joined = done.stdout + done.stderr
    assert "copies-env" in joined or output == "github"  # github annotates no patch
    assert _leaks(joined) == []


def test_redaction_copies_only_what_it_changes() -> None:
    from webhook.engine.hidden import hide, redacted

    obj = _object()
    shown = redacted(obj)
    assert obj == _object()  # the object judged is never changed
    assert shown["spec"]["containers"][0]["env"][0] == {"name": "DB_PASSWORD",
                                                        "value": "(hidden)"}
    assert shown["metadata"]["annotations"] == {"db-password": "(hidden)", "team": "a"}
    assert shown["metadata"]["labels"] is obj["metadata"]["labels"]
    assert hide("k2z in k2zz and [k2z]", {SHORT}) == "(hidden) in k2zz and [(hidden)]"
