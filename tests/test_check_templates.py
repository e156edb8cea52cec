"""Findings on the template that wrote the object: Helm's `# Source:` comments and
kustomize's config.kubernetes.io/origin annotations map each rendered object back to its
file, in every format, with the line in the render kept beside it."""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from builders import run_cli as run

ROOT = Path(__file__).resolve().parents[1]
HELM = shutil.which("helm", path=str(ROOT / ".tools" / "bin"))
GOOD = (ROOT / "examples/good/deployment.yaml").read_text()
LATEST = """\
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: web
      image: registry.example.com/web:latest
      resources: {requests: {cpu: "1", memory: 1Gi}}
"""
RENDERED = f"""\
---
# Source: chart/templates/deployment.yaml
{GOOD}---
# Source: chart/templates/pod.yaml
{LATEST}"""
IMAGE_LINE = RENDERED.splitlines().index("      image: registry.example.com/web:latest") + 1


def check(capsys, monkeypatch, *args: str, stdin: str = RENDERED) -> tuple[int, str]:
    code, out, _ = run(capsys, "check", *args, "-", stdin=stdin, monkeypatch=monkeypatch)
    return code, out


def test_table_and_json_name_the_template(capsys, monkeypatch):
    code, out = check(capsys, monkeypatch)
    assert code == 1
    [row] = [line for line in out.splitlines() if "disallow-latest-tag" in line]
    assert row.endswith(f"[chart/templates/pod.yaml (rendered <stdin>:{IMAGE_LINE}:7)]")
    _, out = check(capsys, monkeypatch, "-o", "json")
    resources = {r["resource"]["kind"]: r["resource"] for r in json.loads(out)["results"]}
    assert resources["Pod"]["template"] == "chart/templates/pod.yaml"
    assert resources["Pod"]["file"] == "<stdin>"  # the render's position stays
    assert {r["template"] for r in resources.values()} == {
        "chart/templates/pod.yaml", "chart/templates/deployment.yaml"}


def test_sarif_github_gitlab_junit_policyreport_name_the_template(capsys, monkeypatch):
    _, out = check(capsys, monkeypatch, "-o", "sarif")
    [result] = [r for r in json.loads(out)["runs"][0]["results"]
                if r["ruleId"] == "disallow-latest-tag"]
    location = result["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "chart/templates/pod.yaml"}}
    assert result["properties"]["rendered"] == f"<stdin>:{IMAGE_LINE}:7"
    _, out = check(capsys, monkeypatch, "-o", "github")
    [line] = [x for x in out.splitlines() if "disallow-latest-tag" in x]
    assert line.startswith("::error file=chart/templates/pod.yaml,title=disallow-latest-tag::")
    assert f"(rendered <stdin>:{IMAGE_LINE}:7)" in line
    _, out = check(capsys, monkeypatch, "-o", "gitlab")
    [issue] = [i for i in json.loads(out) if i["check_name"] == "disallow-latest-tag"]
    assert issue["location"] == {"path": "chart/templates/pod.yaml", "lines": {"begin": 1}}
    assert f"rendered <stdin>:{IMAGE_LINE}:7" in issue["description"]
    _, out = check(capsys, monkeypatch, "-o", "junit")
    files = {case.get("file") for case in ET.fromstring(out).iter("testcase")}
    assert "chart/templates/pod.yaml" in files and "<stdin>" not in files
    _, out = check(capsys, monkeypatch, "-o", "policyreport")
    results = [r for report in yaml.safe_load_all(out) for r in report.get("results", [])]
    latest = next(r for r in results
                  if r["policy"] == "disallow-latest-tag" and r["result"] == "fail")
    assert latest["properties"]["template"] == "chart/templates/pod.yaml"


def test_an_object_without_a_source_comment_keeps_its_own_file(capsys, monkeypatch):
    stream = RENDERED + "---\n" + LATEST.replace("name: web,", "name: plain,")
    _, out = check(capsys, monkeypatch, "-o", "json", stdin=stream)
    plain = [r["resource"] for r in json.loads(out)["results"]
             if r["resource"]["name"] == "plain"]
    assert plain and all("template" not in r for r in plain)


def test_kustomize_origin_annotation(capsys, monkeypatch):
    pod = yaml.safe_load(LATEST)
    pod["metadata"]["annotations"] = {
        "config.kubernetes.io/origin": "path: base/pod.yaml\nrepo: https://example.com/x\n"}
    _, out = check(capsys, monkeypatch, "-o", "sarif", stdin=yaml.safe_dump(pod))
    [result] = [r for r in json.loads(out)["runs"][0]["results"]
                if r["ruleId"] == "disallow-latest-tag"]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == \
        "base/pod.yaml"


@pytest.mark.skipif(HELM is None, reason="helm is in .tools (scripts/setup)")
def test_a_real_helm_render(capsys, monkeypatch, tmp_path):
    chart = tmp_path / "web"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: web\nversion: 0.1.0\n")
    (chart / "templates" / "pod.yaml").write_text(LATEST)
    (chart / "templates" / "deployment.yaml").write_text(GOOD)
    rendered = subprocess.run([HELM, "template", str(chart)], capture_output=True, text=True,
                              check=True, timeout=60).stdout
    _, out = check(capsys, monkeypatch, "-o", "sarif", stdin=rendered)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in json.loads(out)["runs"][0]["results"]}
    assert uris == {"web/templates/pod.yaml"}
