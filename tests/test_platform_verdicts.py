"""The wrong verdicts issue 36 found on public AI-infrastructure repositories, each on a small
object of our own; the comment above each test names the source pattern it stands for."""

from __future__ import annotations

import copy
import json
from typing import Any

import yaml
from builders import container, judge, messages, paths, pod, result, run_cli, with_config

from webhook import Review
from webhook.engine.trainjobs import AT_ADMISSION, train_jobs_from

POD = """\
apiVersion: v1
kind: Pod
metadata: {name: app, labels: {app: app}}
spec:
  securityContext: {runAsNonRoot: true}
  containers:
    - name: app
      image: registry.example.com/app:1.0
      resources: {requests: {cpu: "1", memory: 1Gi}}
"""
LIVENESS = {"httpGet": {"path": "/health", "port": 8000}}


# 1. llm-d and KServe style deployments pin vLLM by digest, as disallow-latest-tag advises:
#    image: vllm/vllm-openai@sha256:<64 hex>
def test_a_vllm_image_pinned_by_digest_gets_vllms_startup_window():
    digest = "vllm/vllm-openai@sha256:" + "ab" * 32
    for image in (digest, "docker.io/" + digest):
        decision = judge(pod(container(image=image, livenessProbe=LIVENESS)))
        [operation] = decision.patch
        value = operation["value"]
        assert value["periodSeconds"] * value["failureThreshold"] == 1800, image
        assert "for up to 1800s" in messages(decision, "inject-startup-probe")[0]


# 2. A repository's mkdocs.yml (`!!python/name:material.extensions.emoji.twemoji`) and an
#    application's test data (`!workspace`) met by a directory walk: valid YAML for their
#    application, no Kubernetes object, so skipped as any other file without one.
def test_a_walk_skips_yaml_with_application_tags(tmp_path, capsys):
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: docs\nmarkdown_extensions:\n  - pymdownx.emoji:\n"
        "      emoji_index: !!python/name:material.extensions.emoji.twemoji\n")
    (tmp_path / "data.yaml").write_text("root: !workspace app\n")
    (tmp_path / "pod.yaml").write_text(POD)
    code, out, err = run_cli(capsys, "check", "--verbose", str(tmp_path))
    assert code == 0, err
    assert "error" not in err
    assert "1 resources" in out and "0 error" in out
    assert f"skipped {tmp_path / 'mkdocs.yml'}: no Kubernetes object" in err
    # Named on its own, a file with an unknown tag is still an error: it was meant as input.
    code, _, err = run_cli(capsys, "check", str(tmp_path / "data.yaml"))
    assert code == 2 and "!workspace" in err


# 3. A repository's manifest with a licence header before the first `---` (Apache-2.0 SPDX
#    lines), then Helm output whose documents are indented differently (4 spaces in one, 2 in
#    the next, sequences unindented): --fix --in-place adds one startupProbe and changes no
#    other line.
FIXABLE = """\
# Copyright 2026 Example Authors
# SPDX-License-Identifier: Apache-2.0
---
apiVersion: v1
kind: ConfigMap
metadata:
    name: settings
data:
    a: "1"
---
# Source: chart/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
  labels: {app: vllm}
spec:
  selector:
    matchLabels:
      app: vllm
  template:
    metadata:
      labels:
        app: vllm
    spec:
      securityContext:
        runAsNonRoot: true
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.9.1
        resources:
          requests: {cpu: "1", memory: 1Gi}
        livenessProbe:
          httpGet: {path: /health, port: 8000}
---
apiVersion: v1
kind: Service
metadata:
      name: vllm
spec:
      ports:
          - port: 8000
"""
ADDED = """\
        startupProbe:
          httpGet:
            path: /health
            port: 8000
          periodSeconds: 10
          failureThreshold: 180
"""


def test_fix_in_place_keeps_the_licence_header_and_every_other_line(tmp_path, capsys):
    path = tmp_path / "all.yaml"
    path.write_text(FIXABLE)
    code, _, err = run_cli(capsys, "check", "--fix", "--in-place", str(path))
    assert code == 0, err
    marker = "          httpGet: {path: /health, port: 8000}\n"
    assert path.read_text() == FIXABLE.replace(marker, marker + ADDED)


# 4. A serving chart's CPU-only profile: `resources.limits: {nvidia.com/gpu: "0"}` (and
#    requests "0" beside it). Zero GPUs is no GPU: no GPU policy speaks of it.
def test_zero_gpus_is_no_gpu_request():
    for count in ("0", 0):
        resources = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": count},
                     "limits": {"nvidia.com/gpu": count}}
        decision = judge(pod(container(resources=resources)))
        assert result(decision, "require-gpu-limits").status == "pass", count
        assert result(decision, "gpu-priority-class").status == "pass"
    fraction = judge(pod(container(resources={"limits": {"nvidia.com/gpu": "0.5"}})))
    assert result(fraction, "require-gpu-limits").status == "fail"


# 7. Pod-level resources (Kubernetes 1.34+, on by default): a serving pod that sets
#    `spec.resources.requests` and no per-container requests; the scheduler places it by them.
def test_pod_level_resources_satisfy_require_requests():
    bare = container(resources={})
    decision = judge(pod(bare, resources={"requests": {"cpu": "4", "memory": "16Gi"}}))
    assert result(decision, "require-requests").status == "pass"
    assert decision.allowed
    only_cpu = judge(pod(bare, resources={"limits": {"cpu": "4"}}))
    assert messages(only_cpu, "require-requests") == [
        "container 'app': add resources.requests.memory"]


# 8. A chart that sets the pod's `runAsNonRoot: true` and a container's `runAsUser: 0` (an
#    init step "run as root"): the kubelet refuses to start it, and the message says so.
def test_root_uid_with_run_as_non_root_is_denied_saying_the_kubelet_refuses_it():
    spec = container(securityContext={"runAsUser": 0})
    decision = judge(pod(spec))  # the builders' pod sets runAsNonRoot: true
    assert not decision.allowed
    assert messages(decision, "disallow-root-user") == [
        "container 'app': runs as root (runAsUser: 0) with runAsNonRoot: true, which the "
        "kubelet refuses to start; set securityContext.runAsUser to a non-zero uid"]


# 6. A Pod Security corpus's Pod with an iSCSI volume at LUN 0 (`iscsi: {lun: 0, ...}`),
#    which the API server accepts: `lun` is required and has no omitempty, so its 0 stays.
def test_a_required_int_keeps_its_zero():
    volume = {"name": "disk", "iscsi": {"targetPortal": "10.0.0.1:3260",
                                        "iqn": "iqn.2001-04.com.example:storage", "lun": 0}}
    decision = judge(pod(container(), volumes=[volume]))
    assert decision.outcome == "allowed", decision.results
    sleep = container(lifecycle={"preStop": {"sleep": {"seconds": 0}}})
    assert judge(pod(sleep)).outcome == "allowed"
    # A zero the API server refuses (a port is 1-65535) is still refused offline.
    ported = judge(pod(container(ports=[{"containerPort": 0}])))
    assert ported.outcome == "error"


def test_no_report_prints_a_missing_location_as_none(tmp_path, capsys):
    path = tmp_path / "pod.yaml"
    path.write_text(POD + "  volumes:\n    - name: disk\n      iscsi: {targetPortal: "
                    "'10.0.0.1:3260', iqn: 'iqn.2001-04.com.example:storage'}\n")
    for output in ("table", "json", "github", "junit", "sarif", "policyreport"):
        code, out, err = run_cli(capsys, "check", "-o", output, str(path))
        assert code == 2 and "iscsi.lun: required value" in out + err, output
        assert "None:" not in out + err and "[None]" not in out + err, output


# Messages: a Volcano training Job (batch.volcano.sh/v1alpha1) beside a batch/v1 Job in one
# chart's output; the table says which is which.
def test_the_table_names_the_api_group_of_a_kind_not_kubernetes_own(tmp_path, capsys):
    (tmp_path / "jobs.yaml").write_text("""\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  tasks:
    - name: worker
      template:
        spec:
          containers: [{name: w, image: "registry.example.com/train:latest"}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: ml}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: "registry.example.com/migrate:latest"}]
""")
    _, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert " Job.batch.volcano.sh ml/train  container 'w'" in out
    assert " Job ml/migrate  container 'm'" in out


# Messages: a chart's or README's placeholder image (`image: <image>`,
# `image: your-vllm-image`) is no reference at all, not one missing a tag.
def test_a_placeholder_image_is_not_an_image_reference():
    for image in ("<image>", "your-vllm-image", "your-registry/vllm:0.9.1", "My Image:1",
                  "MyModel"):
        [message] = messages(judge(pod(container(image=image))), "disallow-latest-tag")
        assert message == (
            f"container 'app': image '{image}' is not an image reference (a placeholder?); "
            "set the image to run, pinned (registry/app:1.2.3 or registry/app@sha256:...)")
    for image in ("registry:5000/app:2", "localhost:5000/yourapp:1", "ghcr.io/org/app:v1-rc1"):
        assert messages(judge(pod(container(image=image))), "disallow-latest-tag") == []


# Messages: `:main`, `:nightly` move as `latest` does; a team names its moving tags.
def test_disallow_latest_tag_takes_the_tags_that_move_like_latest():
    moving = with_config(policies={"disallow-latest-tag": {"params": {
        "tags": ["latest", "main", "nightly"]}}})
    nightly = pod(container(image="vllm/vllm-openai:nightly"))
    assert messages(judge(nightly), "disallow-latest-tag") == []  # latest alone by default
    assert messages(judge(nightly, moving), "disallow-latest-tag") == [
        "container 'app': image 'vllm/vllm-openai:nightly' uses the 'nightly' tag; pin it to a "
        "version (vllm/vllm-openai:1.2.3) or a digest (vllm/vllm-openai@sha256:...)"]


# 5. Kubeflow Trainer v2's shipped ClusterTrainingRuntimes (manifests/base/runtimes,
#    torch-distributed): the `node` container sets no resources; each TrainJob's
#    spec.trainer.resourcesPerNode gives them at run time.
def training_runtime(**resources):
    node = {"name": "node", "image": "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime",
            "command": ["torchrun", "train.py"], **resources}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch-distributed"},
        "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {"securityContext": {"runAsNonRoot": True}, "containers": [
                    node, {"name": "sidecar", "image": "registry.example.com/log:1"}]}}}}}]}}}}


def test_a_training_runtimes_node_container_is_not_denied_for_what_its_trainjobs_give():
    decision = judge(training_runtime())
    # Not a flat denial of the node container, and said plainly; the other container is
    # still the runtime's own and still judged.
    assert messages(decision, "require-requests") == [
        "container 'sidecar': add resources.requests.cpu",
        "container 'sidecar': add resources.requests.memory"]
    assert [w for w in decision.warnings if "resourcesPerNode" in w] == [
        "container 'node' sets no resources: each TrainJob sets them "
        "(spec.trainer.resourcesPerNode) and none that runs this ClusterTrainingRuntime is "
        "among the objects judged, so they are not judged here; give each "
        "resourcesPerNode.requests (cpu, memory)"]
    given = judge(training_runtime(resources={"requests": {"cpu": "1"}}))
    assert messages(given, "require-requests")[0] == (
        "container 'node': add resources.requests.memory")
    assert not [w for w in given.warnings if "resourcesPerNode" in w]


def train_job(name: str, **trainer: Any) -> dict[str, Any]:
    """A TrainJob running the torch-distributed ClusterTrainingRuntime (RuntimeRef's kind
    defaults to ClusterTrainingRuntime)."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 2, **trainer}}}


SIZED = {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"},
         "limits": {"nvidia.com/gpu": "1"}}


def test_a_training_runtime_is_judged_as_each_trainjob_in_the_input_runs_it():
    jobs = train_jobs_from([
        train_job("sized", resourcesPerNode=SIZED),
        train_job("unsized", image="docker.io/kubeflow/pytorch-mnist:latest"),
        train_job("sized"),  # the same TrainJob again (another copy of an example): once
        {**train_job("elsewhere"), "spec": {"runtimeRef": {"name": "other"}}}])
    decision = judge(training_runtime(), review=Review(train_jobs=jobs))
    # The TrainJob that gives resourcesPerNode passes; the one that does not is denied, as
    # the joined object it makes, and its image is the TrainJob's.
    assert messages(decision, "require-requests") == [
        "container 'node' as TrainJob ml/unsized runs it: add resources.requests.cpu",
        "container 'node' as TrainJob ml/unsized runs it: add resources.requests.memory",
        "container 'sidecar': add resources.requests.cpu",
        "container 'sidecar': add resources.requests.memory"]
    assert messages(decision, "disallow-latest-tag") == [
        "container 'node' as TrainJob ml/unsized runs it: image "
        "'docker.io/kubeflow/pytorch-mnist:latest' uses the 'latest' tag; pin it to a version "
        "(docker.io/kubeflow/pytorch-mnist:1.2.3) or a digest "
        "(docker.io/kubeflow/pytorch-mnist@sha256:...)"]
    # The sized TrainJob's GPU is the node container's: its pods need the GPU toleration.
    assert result(decision, "inject-gpu-toleration").status == "patch"
    assert not [w for w in decision.warnings if "resourcesPerNode" in w]


def test_a_namespaced_training_runtime_is_run_by_the_trainjobs_of_its_namespace():
    runtime = training_runtime()
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"]["namespace"] = "team-a"
    job = train_job("sized", resourcesPerNode=SIZED)
    job["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    other = copy.deepcopy(job)
    other["metadata"].update(name="unsized", namespace="team-b")
    del other["spec"]["trainer"]["resourcesPerNode"]
    decision = judge(runtime, review=Review(train_jobs=train_jobs_from([job, other])))
    assert [m for m in messages(decision, "require-requests") if "node" in m] == []
    alone = judge(runtime, review=Review(train_jobs=train_jobs_from([other])))
    assert [w for w in alone.warnings if "resourcesPerNode" in w]


def test_check_judges_a_runtime_with_the_trainjobs_of_other_files(tmp_path, capsys):
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(training_runtime()))
    _, out, _ = run_cli(capsys, "check", str(tmp_path / "runtime.yaml"))
    assert "none that runs this ClusterTrainingRuntime is in the input, so they are not " \
        "judged here" in out
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(train_job("unsized")))
    code, out, _ = run_cli(capsys, "check", str(tmp_path))
    assert code != 0
    assert "container 'node' as TrainJob ml/unsized runs it: add resources.requests.cpu" in out


def test_at_admission_a_runtime_is_told_no_trainjob_exists_yet():
    decision = judge(training_runtime(), review=Review(train_jobs=AT_ADMISSION))
    [warning] = [w for w in decision.warnings if "resourcesPerNode" in w]
    assert "and none exists yet at admission, so they are not judged here" in warning
    # The longest label (a runtime of several replicated jobs) still fits a webhook warning.
    runtime = training_runtime()
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    jobs.append(copy.deepcopy(jobs[0]) | {"name": "launcher"})
    for warning in judge(runtime, review=Review(train_jobs=AT_ADMISSION)).warnings:
        assert len(warning) <= 256, warning


# Quiet by default: a repository whose pods lack the recommended labels (an audit policy)
# and none of whose policies warns; the summary tells the two apart.
def test_audit_findings_are_counted_apart_from_warnings(tmp_path, capsys):
    (tmp_path / "pod.yaml").write_text(POD.replace("labels: {app: app}", "labels: {}"))
    code, out, _ = run_cli(capsys, "check", str(tmp_path / "pod.yaml"))
    assert code == 0
    assert out.splitlines()[-1].endswith(
        "policy results: 11 pass, 0 fail, 0 warn, 0 patch, 2 skip, 0 error, 1 audit")
    _, report, _ = run_cli(capsys, "check", "-o", "json", str(tmp_path / "pod.yaml"))
    summary = json.loads(report)["summary"]
    assert (summary["warn"], summary["audit"]) == (0, 1)


# Messages: Kubeflow Trainer's MPI runtime (a `launcher` and a `node` replicated job): each
# container is located by its replicated job's path from the object's root, the convention
# its findings' fields use, not by a path cut at both ends.
def test_a_training_runtimes_containers_are_located_as_their_fields_are():
    runtime = training_runtime()
    jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    launcher = {"name": "launcher", "template": {"spec": {"template": {
        "metadata": {"labels": {"app": "trainer"}},
        "spec": {"securityContext": {"runAsNonRoot": True}, "containers": [
            {"name": "launcher", "image": "registry.example.com/mpi:1"}]}}}}}
    jobs.insert(0, launcher)
    decision = judge(runtime)
    assert messages(decision, "require-requests")[0] == (
        "container 'launcher' in spec.template.spec.replicatedJobs[0]: add "
        "resources.requests.cpu")
    assert paths(decision, "require-requests")[0] == (
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0]"
        ".resources.requests.cpu")
