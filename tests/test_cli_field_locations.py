"""Findings point at the offending field, file:line:column, in every format that names a place:
the table, JSON, SARIF and GitHub annotations. A field a rule asks to add is not in the file,
so the finding points at its nearest parent that is."""

from __future__ import annotations

import json

import pytest
from builders import run_cli as run

from webhook import decode
from webhook.cli import judge, main

# A Service first, so the Pod starts well into the file; its image is 12 lines further down.
STREAM = """\
# the team's workloads
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: default
spec:
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: default
  labels: {team: search}
spec:
  securityContext:
    runAsNonRoot: true
  containers:
    - name: web
      # pinned by the release job
      image: registry.example.com/web:latest
      env:
        - {name: MODE, value: serve}
"""

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: default, labels: {app: p}}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: app
      image: app:latest
      resources: {requests: {cpu: 100m, memory: 1Gi}}
"""


def where(text: str, needle: str, occurrence: int = 0) -> tuple[int, int]:
    """(line, column) of a text in a file, 1-based, as editors count."""
    found = [(number, line.index(needle) + 1)
             for number, line in enumerate(text.splitlines(), 1) if needle in line]
    return found[occurrence]


@pytest.fixture
def stream(tmp_path):
    path = tmp_path / "workloads.yaml"
    path.write_text(STREAM)
    return path


def test_the_table_names_the_line_and_column_of_the_field(capsys, stream):
    code, out, _ = run(capsys, "check", str(stream))
    assert code == 1
    [latest] = [row for row in out.splitlines() if "disallow-latest-tag" in row]
    line, column = where(STREAM, "image:")
    assert latest.endswith(f"[{stream}:{line}:{column}]")
    assert line > where(STREAM, "kind: Pod")[0] + 10


def test_json_findings_say_where_their_field_is_and_the_resource_where_the_object_is(
        capsys, stream):
    _, out, _ = run(capsys, "check", "-o", "json", str(stream))
    results = json.loads(out)["results"]
    latest = next(r for r in results if r["policy"] == "disallow-latest-tag"
                  and r["result"] == "fail")
    assert (latest["resource"]["line"], latest["resource"]["column"]) == (10, 1)
    [finding] = latest["findings"]
    assert finding["path"] == "spec.containers[0].image"
    assert (finding["line"], finding["column"]) == where(STREAM, "image:")
    # The labels the rule asks for are not there: the finding is at the labels it would join.
    labels = next(r for r in results if r["policy"] == "require-labels" and r["findings"])
    assert (labels["findings"][0]["line"], labels["findings"][0]["column"]) == \
        where(STREAM, "labels:")
    # No requests at all: the container that needs them.
    requests = next(r for r in results if r["policy"] == "require-requests" and r["findings"])
    assert {(f["line"], f["column"]) for f in requests["findings"]} == \
        {where(STREAM, "name: web", 2)}


def test_sarif_regions_start_at_the_field(capsys, stream):
    _, out, _ = run(capsys, "check", "-o", "sarif", str(stream))
    results = json.loads(out)["runs"][0]["results"]
    latest = next(r for r in results if r["ruleId"] == "disallow-latest-tag")
    line, column = where(STREAM, "image:")
    assert latest["locations"][0]["physicalLocation"]["region"] == {
        "startLine": line, "startColumn": column}


def test_github_annotations_are_on_the_field(capsys, stream):
    _, out, _ = run(capsys, "check", "-o", "github", str(stream))
    [latest] = [row for row in out.splitlines() if "title=disallow-latest-tag" in row]
    line, column = where(STREAM, "image:")
    assert latest.startswith(f"::error file={stream},line={line},col={column},")


def test_json_input_gets_field_positions_too(capsys, tmp_path):
    manifest = tmp_path / "pod.json"
    manifest.write_text(
        '{\n  "apiVersion": "v1",\n  "kind": "Pod",\n'
        '  "metadata": {"name": "j", "namespace": "default", "labels": {"app": "j"}},\n'
        '  "spec": {\n    "securityContext": {"runAsNonRoot": true},\n'
        '    "containers": [\n      {"name": "c",\n       "image": "r/c:latest"}\n    ]\n'
        "  }\n}\n")
    _, out, _ = run(capsys, "check", "-o", "json", str(manifest))
    latest = next(r for r in json.loads(out)["results"] if r["policy"] == "disallow-latest-tag")
    assert (latest["findings"][0]["line"], latest["findings"][0]["column"]) == \
        where(manifest.read_text(), '"image"')


def test_the_items_of_a_list_point_at_their_own_fields(capsys, tmp_path):
    items = "".join("  - " + POD.replace("\n", "\n    ").replace("name: p,", f"name: p{n},")
                    .rstrip() + "\n" for n in range(3))
    manifest = tmp_path / "list.yaml"
    manifest.write_text("apiVersion: v1\nkind: List\nitems:\n" + items)
    _, out, _ = run(capsys, "check", "-o", "json", str(manifest))
    found = [(r["findings"][0]["line"], r["findings"][0]["column"])
             for r in json.loads(out)["results"] if r["policy"] == "disallow-latest-tag"]
    assert found == [where(manifest.read_text(), "image:", n) for n in range(3)]


def test_a_tagged_document_read_by_pyyaml_still_has_field_positions(capsys, tmp_path):
    manifest = tmp_path / "tagged.yaml"
    text = POD.replace("image: app:latest", "image: !!str app:latest")
    manifest.write_text(text)
    _, out, _ = run(capsys, "check", "-o", "json", str(manifest))
    latest = next(r for r in json.loads(out)["results"] if r["policy"] == "disallow-latest-tag")
    assert (latest["findings"][0]["line"], latest["findings"][0]["column"]) == \
        where(text, "image:")


def test_a_file_split_between_workers_keeps_field_lines(tmp_path, capsys, monkeypatch):
    stream = tmp_path / "stream.yaml"
    text = "---\n".join([POD] * 30)
    stream.write_text(text)
    monkeypatch.setattr(judge, "TASK_BYTES", 700)
    assert len(judge.tasks([str(stream)], [], None)) > 5
    assert main(["check", "-o", "json", "--jobs", "2", str(stream)]) == 1
    results = json.loads(capsys.readouterr().out)["results"]
    found = [(r["findings"][0]["line"], r["findings"][0]["column"]) for r in results
             if r["policy"] == "disallow-latest-tag"]
    assert found == [where(text, "image:", n) for n in range(30)]


REFUSED = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      securityContext: {runAsNonRoot: true}
      container:
        - name: web
          image: registry.example.com/web:1.2.3
"""


def test_an_object_the_api_server_refuses_is_reported_at_the_refused_field(capsys, tmp_path):
    manifest = tmp_path / "refused.yaml"
    manifest.write_text(REFUSED)
    line, column = where(REFUSED, "container:")
    _, out, _ = run(capsys, "check", "-o", "sarif", str(manifest))
    [result] = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "invalid-manifest"
    assert result["locations"][0]["physicalLocation"]["region"] == {
        "startLine": line, "startColumn": column}
    _, out, _ = run(capsys, "check", "-o", "github", str(manifest))
    [annotation] = [row for row in out.splitlines() if row.startswith("::error")]
    assert f",line={line},col={column},title=invalid manifest::" in annotation
    _, out, _ = run(capsys, "check", "-o", "json", str(manifest))
    [error] = [r for r in json.loads(out)["results"] if r["result"] == "error"]
    assert [(f["line"], f["column"]) for f in error["findings"]] == [(line, column)]


def test_a_key_holding_dots_and_brackets_is_found_where_it_is(tmp_path):
    """A finding's path is keys and indices, never a string parsed back: an annotation key
    holding `.`, `/` and `]` leads to its own line, and renders as written."""
    from builders import policies_in

    from webhook import evaluate
    from webhook.manifests import read_text

    key = "example.com/team]x"
    loaded = policies_in(tmp_path, {
        "id": "team-annotation", "description": "d", "type": "validate", "action": "enforce",
        "scope": "object",
        "validations": [{"expression": f"object.metadata.annotations['{key}'] == 'ml'",
                         "message": "set the team annotation to ml",
                         "fieldPath": f"object.metadata.annotations['{key}']"}]})
    text = ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n  annotations:\n"
            f"    other: x\n    {key}: search\nspec:\n  containers:\n"
            "    - {name: web, image: registry.example.com/web:1.0}\n")
    [document] = read_text(text, "pod.yaml")
    decision = evaluate(decode(document.obj), loaded)
    [found] = next(r for r in decision.results if r.policy == "team-annotation").findings
    assert found.at == ("metadata", "annotations", key)
    assert found.path == f"metadata.annotations[{key}]"
    assert found.pointer == "/metadata/annotations/example.com~1team]x"
    assert document.field(found.at) == (7, 5)
