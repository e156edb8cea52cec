"""Kubeflow Trainer: a runtime judged with the TrainJobs that run it.

A TrainingRuntime or ClusterTrainingRuntime holds the JobSet template of a TrainJob's pods;
its trainer container is named `node`, and each TrainJob that names the runtime in
spec.runtimeRef sets that container's resources (spec.trainer.resourcesPerNode replaces
them), and may set its image and env (spec.trainer.image, spec.trainer.env). So the `node`
container is judged once per TrainJob found with the runtime, as that TrainJob runs it; with
none found it is not faulted for the resources its TrainJobs give, and a warning says plainly
that none was there to judge it with (at admission of a runtime, none exists yet). Read from
kubeflow/trainer's pkg/apis/trainer/v1alpha1/trainjob_types.go (RuntimeRef's kind defaults to
ClusterTrainingRuntime, its apiGroup to trainer.kubeflow.org) and pkg/constants (Node). Pure:
the TrainJobs are handed in (`train_jobs_from` over the input's objects), never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from webhook.engine.workload import Container, PodSpec, Workload, api_group

TRAINER_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = frozenset({"TrainingRuntime", "ClusterTrainingRuntime"})
DEFAULT_RUNTIME_KIND = "ClusterTrainingRuntime"
NODE = "node"  # the trainer container's name in a runtime (Trainer's constants.Node)


@dataclass(frozen=True, slots=True)
class TrainJobUse:
    """One TrainJob's use of a runtime: its namespace and name, and its spec.trainer."""

    namespace: str
    name: str
    trainer: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TrainJobs:
    """The TrainJobs a runtime is judged with, by (runtime kind, runtime name); `where` says
    where they were looked for: `in the input` offline, `at admission` in the webhook."""

    uses: Mapping[tuple[str, str], tuple[TrainJobUse, ...]]
    where: str = "in the input"

    def of(self, kind: str, namespace: str, name: str) -> tuple[TrainJobUse, ...]:
        """The TrainJobs that run this runtime: any namespace's for a ClusterTrainingRuntime,
        its own namespace's for a TrainingRuntime (a manifest naming none lands in the
        namespace it is applied to, so it matches any)."""
        found = self.uses.get((kind, name), ())
        if kind == DEFAULT_RUNTIME_KIND or not namespace:
            return found
        return tuple(job for job in found if job.namespace in (namespace, ""))


NO_TRAIN_JOBS = TrainJobs({}, "among the objects judged")
AT_ADMISSION = TrainJobs({}, "at admission")


def train_jobs_from(objects: Iterable[Any], where: str = "in the input") -> TrainJobs:
    """The lookup over the TrainJobs among `objects`; malformed ones are left out (they are
    reported, or skipped, where they are judged), and so is a TrainJob of the same namespace
    and name as one before it (the same example in two places of a repository)."""
    uses: dict[tuple[str, str], list[TrainJobUse]] = {}
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        if not isinstance(obj, Mapping) or obj.get("kind") != "TrainJob" \
                or api_group(str(obj.get("apiVersion"))) != TRAINER_GROUP:
            continue
        spec, metadata = obj.get("spec"), obj.get("metadata")
        if not isinstance(spec, Mapping) or not isinstance(metadata, Mapping):
            continue
        ref = spec.get("runtimeRef")
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str):
            continue
        if ref.get("apiGroup", TRAINER_GROUP) != TRAINER_GROUP:
            continue
        kind = ref.get("kind") or DEFAULT_RUNTIME_KIND
        trainer = spec.get("trainer")
        namespace = metadata.get("namespace")
        job = TrainJobUse(namespace if isinstance(namespace, str) else "",
                          str(metadata.get("name")),
                          trainer if isinstance(trainer, Mapping) else {})
        if (job.namespace, job.name) in seen:
            continue
        seen.add((job.namespace, job.name))
        uses.setdefault((str(kind), ref["name"]), []).append(job)
    return TrainJobs({key: tuple(found) for key, found in uses.items()}, where)


def is_runtime(workload: Workload) -> bool:
    return workload.kind in RUNTIME_KINDS \
        and api_group(str(workload.obj.get("apiVersion"))) == TRAINER_GROUP


def is_node(container: Container) -> bool:
    return container.name == NODE and container.group == "containers"


def with_train_jobs(workload: Workload, lookup: TrainJobs) -> Workload:
    """The runtime with its `node` containers as each TrainJob of `lookup` runs them; with
    none, a warning for each that sets no resources of its own."""
    if not is_runtime(workload) or not any(is_node(c) for c in workload.containers):
        return workload
    metadata = workload.obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    jobs = lookup.of(workload.kind, namespace if isinstance(namespace, str) else "",
                     str(name))
    if not jobs:
        unseen = tuple(_unjoined(c, workload.kind, lookup.where) for c in workload.containers
                       if is_node(c) and not c.requests and not c.limits)
        return replace(workload, unseen=(*workload.unseen, *unseen)) if unseen else workload
    pods = tuple(_joined_pod(pod, jobs) for pod in workload.pod_specs)
    containers = tuple(container for pod in pods for container in pod.containers)
    return replace(workload, pod_specs=pods, containers=containers)


def _unjoined(container: Container, kind: str, where: str) -> str:
    """Why a `node` container without resources is not faulted, in at most 256 characters
    (the API server cuts a webhook's warning there)."""
    none = ("none exists yet at admission" if where == AT_ADMISSION.where
            else f"none that runs this {kind} is {where}")
    return (f"{container.label} sets no resources: each TrainJob sets them "
            f"(spec.trainer.resourcesPerNode) and {none}, so they are not judged here; give "
            "each resourcesPerNode.requests (cpu, memory)")


def _joined_pod(pod: PodSpec, jobs: tuple[TrainJobUse, ...]) -> PodSpec:
    containers: list[Container] = []
    for container in pod.containers:
        if is_node(container):
            containers += [_joined(container, job) for job in jobs]
        else:
            containers.append(container)
    return replace(pod, containers=tuple(containers))


def _joined(container: Container, job: TrainJobUse) -> Container:
    """The `node` container as this TrainJob runs it: its resourcesPerNode instead of the
    runtime's resources, its image and env over the runtime's. Findings stay at the
    runtime's paths, and name the TrainJob."""
    data = dict(container.data)
    requests, limits = container.requests, container.limits
    trainer = job.trainer
    per_node = trainer.get("resourcesPerNode")
    if isinstance(per_node, Mapping):
        data["resources"] = per_node
        requests, limits = _amounts(per_node, "requests"), _amounts(per_node, "limits")
    if isinstance(trainer.get("image"), str):
        data["image"] = trainer["image"]
    env = trainer.get("env")
    if isinstance(env, list) and env:
        names = {entry.get("name") for entry in env if isinstance(entry, Mapping)}
        own = [entry for entry in data.get("env") or () if entry.get("name") not in names]
        data["env"] = [*own, *(entry for entry in env if isinstance(entry, Mapping))]
    shown = f"{job.namespace}/{job.name}" if job.namespace else job.name
    return replace(container, data=data, requests=requests, limits=limits,
                   run_by=f"TrainJob {shown}", elsewhere=frozenset())


def _amounts(resources: Mapping[str, Any], which: str) -> Mapping[str, Any]:
    found = resources.get(which)
    return found if isinstance(found, Mapping) else {}
