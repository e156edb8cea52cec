"""`quickq-guard test`: the policy test suites shipped for every default policy pass, and the
command catches a suite whose expectations are wrong."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest
import yaml

from webhook import load_policies
from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
SUITES = ROOT / "policies" / "tests"


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_shipped_policy_has_a_passing_suite(capsys):
    code, out, err = run(capsys, "test", str(SUITES))
    assert (code, err) == (0, "")
    assert out.splitlines()[-1].endswith(" passed, 0 failed")
    for policy in load_policies().policies:
        suite = yaml.safe_load((SUITES / f"{policy.id}.yaml").read_text())
        assert suite["kind"] == "PolicyTest" and suite["policies"] == [policy.id]
        results = {case.get("result") for case in suite["cases"]}
        assert "pass" in results, policy.id
        assert results & {"fail", "patch"}, policy.id  # the suite sees the policy bite
        if policy.type == "mutate":
            assert any("patched" in case for case in suite["cases"]), policy.id


def test_the_suites_are_not_read_as_policies():
    ids = {policy.id for policy in load_policies().policies}
    assert ids == {path.stem for path in (ROOT / "policies").glob("*.yaml")}


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


SUITE = """\
apiVersion: quickq.io/v1
kind: PolicyTest
name: mine
policies: [disallow-latest-tag, inject-gpu-toleration]
resources:
  - object:
      apiVersion: v1
      kind: Pod
      metadata: {name: web, namespace: default}
      spec:
        containers: [{name: web, image: "web:latest", resources: {limits: {nvidia.com/gpu: 1}}}]
cases:
  - {resource: Pod/default/web, policy: disallow-latest-tag, result: fail}
  - {resource: web, policy: inject-gpu-toleration, result: patch}
"""


def test_the_old_api_version_still_runs_with_a_deprecation_note(capsys, tmp_path):
    write(tmp_path, "suite.yaml", SUITE.replace("quickq.io/v1", "quickq-guard/v1"))
    code, out, err = run(capsys, "test", str(tmp_path))
    assert code == 0 and out.splitlines()[-1] == "2 passed, 0 failed"
    assert "apiVersion quickq-guard/v1 is deprecated; write quickq.io/v1" in err
    write(tmp_path, "suite.yaml", SUITE)
    assert run(capsys, "test", str(tmp_path))[2] == ""


def test_a_wrong_expectation_fails_naming_file_line_and_what_differs(capsys, tmp_path):
    suite = write(tmp_path, "suite.yaml", SUITE.replace("result: fail}", "result: pass}"))
    code, out, _ = run(capsys, "test", str(tmp_path))
    assert code == 1
    [failure] = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert failure == f"FAIL  mine: Pod/default/web disallow-latest-tag  [{suite}:13]"
    assert "result: expected pass, got fail (container 'web': image 'web:latest'" in out
    assert out.splitlines()[-1] == "1 passed, 1 failed"


def test_a_wrong_patched_resource_shows_the_difference(capsys, tmp_path):
    expected = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web",
                                                                 "namespace": "default"},
                "spec": {"containers": [{"name": "web", "image": "web:latest",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}
    write(tmp_path, "suite.yaml", SUITE + "  - resource: web\n    patched: "
          + json.dumps(expected) + "\n")
    code, out, _ = run(capsys, "test", str(tmp_path))
    assert code == 1
    assert "patched: differs from the expected resource" in out
    assert '"op": "remove", "path": "/spec/tolerations/0/effect"' in out
    expected["spec"]["tolerations"][0]["effect"] = "NoSchedule"
    write(tmp_path, "suite.yaml", SUITE + "  - resource: web\n    patched: "
          + json.dumps(expected) + "\n")
    assert run(capsys, "test", str(tmp_path))[0] == 0


def test_a_resource_the_cases_do_not_have_fails_the_case(capsys, tmp_path):
    write(tmp_path, "suite.yaml", SUITE.replace("{resource: web,", "{resource: api,"))
    code, out, _ = run(capsys, "test", str(tmp_path))
    assert code == 1 and "no resource api among the test's resources" in out


@pytest.mark.parametrize(("change", "problem"), [
    (("policies: [disallow-latest-tag,", "policies: [no-such-policy,"),
     "policies: no loaded policy no-such-policy"),
    (("result: fail}", "result: denied}"), "cases.0.result: Input should be"),
    (("kind: Pod\n", "kind: Pod\n      bogus: [\n"), "invalid YAML"),
    (("  - object:\n", "  - file: missing.yaml\n    object:\n"), "give either file or object"),
])
def test_a_broken_test_file_is_an_error(capsys, tmp_path, change, problem):
    suite = write(tmp_path, "suite.yaml", SUITE.replace(*change))
    code, _, err = run(capsys, "test", str(suite))
    assert code == 2
    assert err.startswith(f"quickq-guard: error: {suite}") and problem in err


def test_no_test_file_is_an_error(capsys, tmp_path):
    write(tmp_path, "pod.yaml", "apiVersion: v1\nkind: Pod\n")
    code, _, err = run(capsys, "test", str(tmp_path))
    assert code == 2 and "no PolicyTest file found" in err


def test_resources_from_files_custom_policies_and_an_inline_config(capsys, tmp_path):
    policies = tmp_path / "my-policies"
    policies.mkdir()
    write(policies, "team-label.yaml", """\
        id: team-label
        description: Objects say which team owns them.
        type: validate
        action: enforce
        rule: require-labels
        params: {labels: [team]}
        """)
    write(tmp_path, "pods.yaml", """\
        apiVersion: v1
        kind: Pod
        metadata: {name: owned, namespace: default, labels: {team: search}}
        spec: {containers: [{name: a, image: a:1}]}
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: orphan, namespace: default}
        spec: {containers: [{name: a, image: a:1}]}
        """)
    write(tmp_path, "suite.yaml", """\
        apiVersion: quickq.io/v1
        kind: PolicyTest
        name: team-label in dry-run
        policyDir: my-policies
        config: {mode: dry-run}
        resources:
          - file: pods.yaml
        cases:
          - {resource: owned, policy: team-label, result: pass, outcome: allowed}
          - {resource: orphan, policy: team-label, result: fail, outcome: would-deny,
             paths: [metadata.labels.team]}
        """)
    code, out, _ = run(capsys, "test", str(tmp_path))
    assert code == 0, out
    assert out.splitlines()[-1] == "2 passed, 0 failed"


def test_the_output_formats(capsys, tmp_path):
    suite = write(tmp_path, "suite.yaml", SUITE.replace("result: fail}", "result: pass}"))
    code, out, _ = run(capsys, "test", "-o", "junit", str(suite))
    root = ElementTree.fromstring(out)
    assert (code, root.get("tests"), root.get("failures")) == (1, "2", "1")
    [failed] = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert failed.get("line") == "13" and failed.get("file") == str(suite)
    _, out, _ = run(capsys, "test", "-o", "json", str(suite))
    report = json.loads(out)
    assert report["summary"] == {"cases": 2, "pass": 1, "fail": 1}
    assert [case["result"] for case in report["cases"]] == ["fail", "pass"]
    _, out, _ = run(capsys, "test", "-o", "github", str(suite))
    assert out.startswith(f"::error file={suite},line=13,col=1,title=mine%3A Pod/default/web ")
    _, out, _ = run(capsys, "test", "-q", str(suite))
    assert [line[:4] for line in out.splitlines()[:-1] if line[:4] in ("PASS", "FAIL")] == \
        ["FAIL"]
