"""What a directory check leaves out is shown and counted as skipped: kinds not judged,
excluded namespaces, kustomize's patch files and lone patch fragments."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import pytest
from builders import run_cli as run

from webhook.cli import kustomize

KUSTOMIZATION = """\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [deployment.yaml]
patches:
  - path: patches/gpu.yaml
  - target: {kind: Deployment}
    patch: |-
      - op: add
        path: /spec/replicas
        value: 2
patchesStrategicMerge:
  - memory.yaml
"""
DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm, labels: {app: vllm}}
spec:
  selector: {matchLabels: {app: vllm}}
  template:
    metadata: {labels: {app: vllm}}
    spec:
      securityContext: {runAsNonRoot: true}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.9.1
          resources: {requests: {cpu: "1", memory: 1Gi}}
"""
# What kustomize patches look like: containers named, with only the fields changed.
PATCH = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm}
spec:
  template:
    spec:
      containers:
        - name: vllm
          resources:
            limits: {%s}
"""


def overlay(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "kustomization.yaml").write_text(KUSTOMIZATION)
    (tmp_path / "deployment.yaml").write_text(DEPLOYMENT)
    (tmp_path / "patches" / "gpu.yaml").write_text(PATCH % "nvidia.com/gpu: 1")
    (tmp_path / "memory.yaml").write_text(PATCH % "memory: 2Gi")
    return tmp_path


def test_the_patches_a_kustomization_lists_are_skipped_saying_so(capsys, tmp_path):
    code, out, err = run(capsys, "check", "--verbose", str(overlay(tmp_path)))
    assert code == 0, out
    assert out.splitlines()[-1].startswith("1 resources: 1 allowed, 0 denied, 0 error;")
    assert (f"note: skipped {tmp_path}/patches/gpu.yaml: a kustomize patch "
            f"({tmp_path}/kustomization.yaml lists it under patches:); check the "
            "output of kustomize build instead") in err
    assert (f"note: skipped {tmp_path}/memory.yaml: a kustomize patch ({tmp_path}/"
            "kustomization.yaml lists it under patchesStrategicMerge:)") in err
    assert (f"note: skipped {tmp_path}/kustomization.yaml: a kustomization; check what it "
            f"builds: kustomize build {tmp_path} | quickq-guard check -") in err
    # Without --verbose, one note for all of them (a repository has dozens of overlays).
    code, _, err = run(capsys, "check", str(tmp_path))
    assert code == 0
    assert err == ("quickq-guard: note: skipped 3 files with no Kubernetes object to judge "
                   "(1 kustomization: check what each builds with kustomize build DIR | "
                   "quickq-guard check -); --verbose lists them\n")


def test_a_patch_file_named_on_the_command_line_is_still_judged(capsys, tmp_path):
    code, out, _ = run(capsys, "check", "--show-skipped", str(overlay(tmp_path) / "memory.yaml"))
    assert "SKIP" in out and "incomplete: no container has an image" in out
    assert code == 0


def test_a_lone_patch_fragment_is_incomplete_not_denied(capsys, tmp_path):
    (tmp_path / "lone.yaml").write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: vllm}
        spec:
          template:
            spec:
              containers:
                - name: sidecar
                  $patch: delete
        """))
    code, out, err = run(capsys, "check", "--show-skipped", str(tmp_path))
    assert code == 0 and err == ""
    assert ("SKIP        -                          Deployment vllm  incomplete: it has a "
            "strategic merge patch directive ($patch), as in a kustomize patch; check the "
            "output of kustomize build instead") in out
    assert out.splitlines()[-1].startswith("1 resources: 0 allowed, 0 denied, 0 error, "
                                           "1 skipped;")


def test_a_whole_object_with_a_bad_image_is_still_denied(capsys, tmp_path):
    (tmp_path / "pod.yaml").write_text(DEPLOYMENT.replace(
        "          image: vllm/vllm-openai:v0.9.1\n", "").replace(
        "        - name: vllm\n", "        - name: vllm\n          image: app:latest\n"))
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 1 and "DENY" in out


def test_an_excluded_namespace_and_a_kind_not_judged_are_shown_and_counted(capsys, tmp_path):
    (tmp_path / "all.yaml").write_text(textwrap.dedent("""\
        apiVersion: apps/v1
        kind: DaemonSet
        metadata: {name: agent, namespace: kube-system}
        spec:
          selector: {matchLabels: {app: agent}}
          template:
            metadata: {labels: {app: agent}}
            spec:
              containers: [{name: agent, image: alpine:latest}]
        ---
        apiVersion: v1
        kind: Service
        metadata: {name: web}
        spec: {ports: [{port: 80}]}
        """))
    code, out, err = run(capsys, "check", str(tmp_path))
    assert code == 0 and "SKIP" not in out  # counted, and listed only when asked
    assert out.startswith("2 resources: 0 allowed, 0 denied, 0 error, 2 skipped;")
    assert err == ("quickq-guard: note: 2 objects not judged (a kind quickq-guard does not "
                   "judge, an excluded namespace): --show-skipped lists them\n")
    code, out, _ = run(capsys, "check", "--show-skipped", str(tmp_path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == ("SKIP        -                          DaemonSet kube-system/agent  "
                        f"namespace kube-system is excluded  [{tmp_path}/all.yaml:1:1]")
    assert lines[1] == ("SKIP        -                          Service web  kind Service is "
                        f"not judged  [{tmp_path}/all.yaml:11:1]")
    assert lines[2].startswith("2 resources: 0 allowed, 0 denied, 0 error, 2 skipped;")
    _, quiet, _ = run(capsys, "check", "-q", str(tmp_path))
    assert "SKIP" not in quiet
    _, report, _ = run(capsys, "check", "-o", "json", str(tmp_path))
    summary = json.loads(report)["summary"]
    assert summary["skipped"] == 2 and summary["outcomes"]["allowed"] == 0
    # Once per object, not once per policy.
    assert [(r["resource"]["name"], r["policy"], r["result"], r["message"])
            for r in json.loads(report)["results"]] == [
        ("agent", None, "skip", "namespace kube-system is excluded"),
        ("web", None, "skip", "kind Service is not judged")]
    _, junit, _ = run(capsys, "check", "-o", "junit", str(tmp_path))
    assert 'tests="2" failures="0" errors="0" skipped="2"' in junit
    assert junit.count('name="not judged"') == 2
    # The summary counts the skip results the reports write: one per object not judged.
    assert summary["skip"] == 2
    assert "policy results: 0 pass, 0 fail, 0 warn, 0 patch, 2 skip, 0 error" in out
    _, policyreport, _ = run(capsys, "check", "-o", "policyreport", str(tmp_path))
    entries = [json.loads(line[2:]) for line in policyreport.splitlines()
               if line.startswith("- {")]
    assert [(e["resources"][0]["name"], e["policy"], e["result"]) for e in entries] == [
        ("web", "judged", "skip"), ("agent", "judged", "skip")]
    assert 'summary: {"pass":0,"fail":0,"warn":0,"error":0,"skip":1}' in policyreport


def test_fix_leaves_the_patches_a_kustomization_lists_alone(capsys, tmp_path):
    folder = overlay(tmp_path)
    before = {path: path.read_text() for path in (folder / "patches" / "gpu.yaml",
                                                  folder / "memory.yaml",
                                                  folder / "kustomization.yaml")}
    code, out, err = run(capsys, "check", "--fix", "--in-place", "--verbose", str(folder))
    assert code == 0, err
    assert {path: path.read_text() for path in before} == before
    assert (f"note: skipped {folder}/patches/gpu.yaml: a kustomize patch "
            f"({folder}/kustomization.yaml lists it under patches:)") in err
    assert f"note: skipped {folder}/kustomization.yaml: a kustomization" in err
    # Printed, the patches are left out: `check --fix dir | kubectl apply -f -` must not
    # apply fragments as whole objects.
    code, out, err = run(capsys, "check", "--fix", str(folder))
    assert code == 0, err
    assert "# Source: " + str(folder / "deployment.yaml") in out
    assert "patches/gpu.yaml" not in out and "nvidia.com/gpu" not in out


def _nested(depth: int, inner: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = inner
    for _ in range(depth):
        obj = {"spec": obj}
    return obj


@pytest.mark.parametrize(("obj", "directive"), [
    ({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}, True),
    ({"metadata": {"$setElementOrder/containers": [{"name": "a"}]}}, True),
    ({1: {"$retainKeys": ["a"]}, None: "no", 2.5: "yes"}, True),  # keys JSON has not
    ({"metadata": {"size": 2**70}, "$patch": "replace"}, True),  # past 64 bits: walked
    (_nested(300, {"$patch": "delete"}), False),  # deeper than a directive is looked for
    (_nested(60, {"$patch": "delete"}), True),
    (_nested(300, {}) | {"$patch": "delete"}, True),  # too deep for orjson: walked
    ({"metadata": {"annotations": {"note": "$patch: delete"}}}, False),  # a value, not a key
    ({"metadata": {"$name": "a", "name": "$patch"}}, False),
])
def test_a_directive_key_is_found_wherever_it_is(obj, directive):
    found = kustomize.fragment(obj)
    assert (found == "it has a strategic merge patch directive ($patch)") is directive
