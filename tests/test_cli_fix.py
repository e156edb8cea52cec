"""`check --fix`: the mutate policies' patches applied to the files people keep in git, with
their comments and formatting, and a clear word on what could not be fixed."""

from __future__ import annotations

import copy
import difflib
from pathlib import Path

import pytest
import yaml
from builders import run_cli as run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
GPU_POD = """\
# Copyright 2026 The Example Authors. Licensed under the Apache License 2.0.
apiVersion: v1
kind: Pod
metadata:
  name: llm   # the model server
  namespace: ml
  labels: {app: llm}
spec:
  priorityClassName: gpu
  securityContext: {runAsNonRoot: true}
  containers:
    - name: server
      image: "registry.example.com/llm:1.0"   # pinned
      resources:
        requests: {cpu: '4', memory: 32Gi, nvidia.com/gpu: 1}
        limits: {nvidia.com/gpu: 1}
      livenessProbe:
        httpGet: {path: /healthz, port: 8080}
        failureThreshold: 6
  volumes:
    - name: config
      configMap: {name: llm, defaultMode: 0644}   # octal, as written
"""




def test_fix_keeps_comments_and_formatting_and_only_adds_the_patched_fields(capsys, tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(GPU_POD)
    code, out, err = run(capsys, "check", "--fix", str(path))
    assert code == 0 and err == ""
    diff = [line for line in difflib.ndiff(GPU_POD.splitlines(), out.splitlines())
            if line[0] in "+-"]
    assert all(line.startswith("+ ") for line in diff), diff  # nothing removed or changed
    fixed = yaml.safe_load(out)
    container = fixed["spec"]["containers"][0]
    assert container["startupProbe"] == {"httpGet": {"path": "/healthz", "port": 8080},
                                         "periodSeconds": 10, "failureThreshold": 60}
    assert fixed["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "      startupProbe:\n        httpGet:" in out  # the file's own indentation
    assert "  tolerations:\n    - key: nvidia.com/gpu" in out


def test_fix_is_idempotent(capsys, tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text(GPU_POD)
    _, once, _ = run(capsys, "check", "--fix", str(path))
    path.write_text(once)
    code, twice, _ = run(capsys, "check", "--fix", str(path))
    assert code == 0 and twice == once


def test_fix_in_place_writes_each_file_back(capsys, tmp_path):
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(GPU_POD)
    untouched = (EXAMPLES / "good" / "pod.yaml").read_text()
    second.write_text(untouched)
    code, out, err = run(capsys, "check", "--fix", "--in-place", str(tmp_path))
    assert code == 0 and out == ""
    assert f"fixed {first}" in err and str(second) not in err
    assert first.read_text().startswith("# Copyright 2026")
    assert "startupProbe" in first.read_text()
    assert second.read_text() == untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "b.yaml"]


def test_fix_in_place_never_writes_a_file_it_refuses(capsys, tmp_path):
    path = tmp_path / "mixed.yaml"
    text = GPU_POD + "---\njust: a values file\n"
    path.write_text(text)
    code, _, err = run(capsys, "check", "--fix", "--in-place", str(path))
    assert code == 2
    line = len(GPU_POD.splitlines()) + 2  # after the `---`
    assert f"{path}:{line}:1: not a Kubernetes object" in err
    assert path.read_text() == text


def test_fix_reports_what_it_cannot_fix_on_stderr(capsys):
    path = EXAMPLES / "bad" / "pod.yaml"
    code, out, err = run(capsys, "check", "--fix", str(path))
    assert code == 1
    assert out == path.read_text()  # nothing to patch: printed as it is
    lines = err.splitlines()
    start = next(n for n, line in enumerate(path.read_text().splitlines(), 1)
                 if line.startswith("apiVersion"))
    where = f"{path}:{start}:1 Pod default/quick-test: "
    assert all(line.startswith(f"quickq-guard: cannot fix: {where}") for line in lines)
    assert any("[disallow-latest-tag]" in line and "(field: spec.containers[0].image)" in line
               for line in lines)


@pytest.mark.parametrize(("stdin", "problem"), [
    ("Hello, this is prose.\n", "not a Kubernetes object"),
    ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {{ .Values.name }}\n",
     "unrendered Helm template"),
    ("", "no Kubernetes object found"),
])
def test_fix_refuses_what_is_not_a_manifest(capsys, monkeypatch, stdin, problem):
    code, out, err = run(capsys, "check", "--fix", "-", stdin=stdin, monkeypatch=monkeypatch)
    assert code == 2
    assert out == ""
    assert problem in err


def test_fix_of_a_missing_file_says_so(capsys, tmp_path):
    code, out, err = run(capsys, "check", "--fix", str(tmp_path / "nope.yaml"))
    assert (code, out) == (2, "")
    assert f"{tmp_path / 'nope.yaml'}: no such file or directory" in err


def test_fix_of_a_directory_names_each_file(capsys, tmp_path):
    (tmp_path / "a.yaml").write_text(GPU_POD)
    (tmp_path / "values.yaml").write_text("replicas: 1\n")
    (tmp_path / "z.yaml").write_text((EXAMPLES / "good" / "pod.yaml").read_text())
    code, out, _ = run(capsys, "check", "--fix", str(tmp_path))
    assert code == 0
    sources = [line for line in out.splitlines() if line.startswith("# Source: ")]
    assert sources == [f"# Source: {tmp_path / 'a.yaml'}", f"# Source: {tmp_path / 'z.yaml'}"]
    assert len([d for d in yaml.safe_load_all(out) if d]) == 2


def test_fix_patches_list_items(capsys, tmp_path):
    pod = yaml.safe_load(GPU_POD)
    path = tmp_path / "list.yaml"
    items = [pod, copy.deepcopy(pod)]  # not the same object: that would be a YAML alias
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    code, out, _ = run(capsys, "check", "--fix", str(path))
    assert code == 0
    items = yaml.safe_load(out)["items"]
    assert all("startupProbe" in item["spec"]["containers"][0] for item in items)


@pytest.mark.parametrize(("args", "problem"), [
    (["--fix", "-o", "json"], "--fix prints YAML manifests"),
    (["--in-place"], "pass --fix --in-place"),
    (["--fix", "--in-place", "-"], "cannot write back to stdin"),
])
def test_fix_option_mistakes_are_usage_errors(capsys, args, problem):
    code, out, err = run(capsys, "check", *args, str(EXAMPLES / "good" / "pod.yaml"))
    assert (code, out) == (2, "")
    assert problem in err


REPLACE_AND_REMOVE = {
    "replace.yaml": """\
id: new-server-flag
description: the server's first argument is --new, not --old
type: mutate
action: enforce
scope: container
mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        has(container.args) && container.args.size() > 0 && container.args[0] == '--old'
        ? [JSONPatch{op: 'replace', path: '/args/0', value: '--new'}] : []
""",
    "remove.yaml": """\
id: drop-legacy-annotation
description: the legacy annotation is gone
type: mutate
action: enforce
mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        'legacy' in object.metadata.?annotations.orValue({})
        ? [JSONPatch{op: 'remove', path: '/metadata/annotations/legacy'}] : []
""",
}
REPLACED_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: server
  annotations:
    legacy: "yes"   # to be removed
    team: ml
spec:
  containers:
    - name: server
      image: registry.example.com/server:1.0
      args: ["--old", "--port=8080"]
"""


def test_fix_applies_replace_and_remove_as_rfc_6902_says(capsys, tmp_path):
    """CEL mutations emit replace and remove: a replace changes the element in place (it
    does not insert one), a remove deletes it, and the file keeps the rest as written."""
    policies = tmp_path / "policies"
    policies.mkdir()
    for name, text in REPLACE_AND_REMOVE.items():
        (policies / name).write_text(text)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(REPLACED_POD)
    code, out, err = run(capsys, "check", "--fix", "--no-default-policies", "--policies",
                         str(policies), str(manifest))
    assert code == 0, err
    fixed = yaml.safe_load(out)
    assert fixed["spec"]["containers"][0]["args"] == ["--new", "--port=8080"]
    assert fixed["metadata"]["annotations"] == {"team": "ml"}
    assert "to be removed" not in out and 'image: registry.example.com/server:1.0' in out
    manifest.write_text(out)  # and again: nothing left to change
    code, again, err = run(capsys, "check", "--fix", "--no-default-policies", "--policies",
                           str(policies), str(manifest))
    assert code == 0 and again == out, err


PULL_LABEL = """\
id: label-always-pulled
description: Pods whose containers are all pulled every time are labelled so.
type: mutate
action: enforce
mutations:
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        object.spec.containers.all(c, c.imagePullPolicy == 'Always')
        && !has(object.metadata.labels)
        ? [JSONPatch{op: 'add', path: '/metadata/labels', value: {'pull': 'always'}}] : []
"""
LATEST_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
    - name: app
      image: registry.example.com/app:latest
      ports:
        - containerPort: 80
"""


def test_fix_judges_as_applied_and_writes_no_server_default(capsys, tmp_path):
    """A policy reading a default (imagePullPolicy, Always for :latest) patches under --fix as
    at kubectl apply, and only its label lands in the file: no imagePullPolicy, no protocol,
    none of the Pod's default tolerations."""
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "label.yaml").write_text(PULL_LABEL)
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(LATEST_POD)
    code, out, err = run(capsys, "check", "--fix", str(manifest), "--no-default-policies",
                         "--policies", str(policies))
    assert code == 0, err
    assert yaml.safe_load(out) == {**yaml.safe_load(LATEST_POD),
                                   "metadata": {"name": "web", "labels": {"pull": "always"}}}
