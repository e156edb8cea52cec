"""A Pod, a pod controller, an ML workload, a custom kind or a NodeTemplate, seen as pod specs
and containers with their paths.

Rules never care which kind they judge: they get a `Workload`, whose public shape is

- `pod_specs`: every pod spec of the object (`PodSpec`), each with its `path`
  (`spec.template.spec` in a Deployment, `spec.pytorchReplicaSpecs.Worker.template.spec` in a
  PyTorchJob, `spec.predictor` in a KServe InferenceService, whose predictor inlines its pod
  spec), its `data`, its `containers`, its `template_path` (what a change of rolls out new
  pods) and `labels_path` (where the pods' labels are);
- `containers`: every container of every pod spec, in order (`Container`), each with its
  `path` (`spec.template.spec.containers[1]`), `group` (containers, initContainers,
  ephemeralContainers; `model` for a KServe model spec, which is a container with its own
  fields; `runner` for an OME component's container; `nodeTemplate` for a NodeTemplate's
  spec) and `data`;
- `obj`, `kind` and the object's own `labels`.

So every message and patch uses the object's own paths. Which kinds are judged and where they
keep their pod specs is in `WORKLOAD_KINDS` (by API group and kind, any version); a policy
config adds custom kinds (`Config.customKinds`) as `PodSite`s too.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from webhook.engine import schema
from webhook.engine.kubernetes_fields import KINDS
from webhook.engine.patch import Path
from webhook.engine.patch import dotted as dotted  # rules and messages name paths with it


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else ""


# How a pod spec sits in its object:
# pod: the object is the pod (a Pod); its labels are the object's.
# template: in a PodTemplateSpec (`<template>.spec`): the template's metadata.labels are the
#   pods'; the pod spec is checked as the Kubernetes PodSpec it is.
# inline: the pod spec's fields sit among a component's own (a KServe predictor, a
#   ServingRuntime spec), with the pods' labels in the component's `labels`.
# composed: no pod spec at all; the kind's operator composes the pods from fields of its own
#   (webhook.engine.workload.composed reads them as the pod spec they become).
Style = Literal["pod", "template", "inline", "composed"]
ANY = "*"  # a path segment that stands for every key of a mapping or item of a list


@dataclass(frozen=True, slots=True)
class PodSite:
    """Where a kind keeps pod specs: the path of the pod spec (ANY for each key or item), how
    it sits there, and fields of it that hold one container each (KServe's `model`)."""

    path: Path
    style: Style = "template"
    models: tuple[str, ...] = ()
    # The group of the containers in `models`, and the name of one that names none: KServe's
    # model specs, an Argo template's container or script.
    model_group: str = "model"
    model_name: str = "kserve-container"
    # An inline pod spec's labels, below it (a KServe component's `labels`).
    labels: Path = ("labels",)
    # A mapping whose pod-level securityContext each pod spec without one of its own gets
    # (an Argo Workflow's spec for each of its templates).
    shared: Path | None = None
    # Whether a pod spec there without containers makes no pod (an Argo steps template).
    only_with_containers: bool = False
    # Fields of its pod specs quickq-guard cannot see through (UNSEEN_FIELDS).
    unseen: tuple[str, ...] = ()
    # The kind the object holding the pod spec must be, when the path alone cannot tell (an
    # AppWrapper's component is a Pod, whose `spec` is a pod spec, or a Job, whose is not).
    holder_kind: str = ""


def _template(*path: str | int) -> PodSite:
    return PodSite((*path, "spec"))


# KServe predictor fields that each hold one container: the model spec and the older
# per-framework specs (the serving runtime supplies the image when they name none).
KSERVE_MODELS = ("model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx",
                 "huggingface", "pmml", "lightgbm", "paddle")
MODEL_CONTAINER = "kserve-container"  # the name KServe gives a model spec's container
OME_CONTAINER = "ome-container"  # the name OME gives a runner's or model spec's container
# Container groups whose image the serving runtime supplies when they name none: a KServe or
# OME model spec, an OME runner.
IMAGE_FROM_RUNTIME = frozenset({"model", "runner"})
_RAY_CLUSTER = ("headGroupSpec",), ("workerGroupSpecs", ANY)

def _ome_components(*components: str) -> tuple[PodSite, ...]:
    """OME's engine, decoder and router (or a runtime's engineConfig...): each inlines its
    pod spec around its `runner`, and a multi-node engine or decoder has a `leader` and a
    `worker` of their own (not the router)."""
    return tuple(PodSite(("spec", component, *part), "inline", ("runner",), "runner",
                         OME_CONTAINER)
                 for component in components
                 for part in ((), ("leader",), ("worker",))
                 if not component.startswith("router") or not part)


class BuiltIn(NamedTuple):
    """A built-in kind quickq-guard judges: its apiVersion, its resource (plural) and the
    path of its pod spec. The one table the export, the test builders and the cluster tests
    derive theirs from."""

    api_version: str
    resource: str
    pod_spec: tuple[str, ...]


IN_TEMPLATE = ("spec", "template", "spec")
BUILT_IN: dict[str, BuiltIn] = {
    "Pod": BuiltIn("v1", "pods", ("spec",)),
    "ReplicationController": BuiltIn("v1", "replicationcontrollers", IN_TEMPLATE),
    "Deployment": BuiltIn("apps/v1", "deployments", IN_TEMPLATE),
    "ReplicaSet": BuiltIn("apps/v1", "replicasets", IN_TEMPLATE),
    "StatefulSet": BuiltIn("apps/v1", "statefulsets", IN_TEMPLATE),
    "DaemonSet": BuiltIn("apps/v1", "daemonsets", IN_TEMPLATE),
    "Job": BuiltIn("batch/v1", "jobs", IN_TEMPLATE),
    "CronJob": BuiltIn("batch/v1", "cronjobs", ("spec", "jobTemplate", "spec", "template",
                                                "spec")),
}


# Where each judged kind keeps its pod specs, by (API group, kind).
WORKLOAD_KINDS: dict[tuple[str, str], tuple[PodSite, ...]] = {
    **{(api_group(built.api_version), kind):
       (PodSite(built.pod_spec, "pod") if kind == "Pod" else PodSite(built.pod_spec),)
       for kind, built in BUILT_IN.items()},
    # KServe
    ("serving.kserve.io", "InferenceService"): (
        PodSite(("spec", "predictor"), "inline", KSERVE_MODELS),
        PodSite(("spec", "predictor", "workerSpec"), "inline"),
        PodSite(("spec", "transformer"), "inline"),
        PodSite(("spec", "explainer"), "inline", ("art",)),
    ),
    **{("serving.kserve.io", kind): (PodSite(("spec",), "inline"),
                                     PodSite(("spec", "workerSpec"), "inline"))
       for kind in ("ServingRuntime", "ClusterServingRuntime")},
    # Kubeflow training operator: every replica spec's template
    **{("kubeflow.org", kind): (_template("spec", replicas, ANY, "template"),)
       for kind, replicas in (("PyTorchJob", "pytorchReplicaSpecs"),
                              ("TFJob", "tfReplicaSpecs"), ("MPIJob", "mpiReplicaSpecs"),
                              ("XGBoostJob", "xgbReplicaSpecs"),
                              ("PaddleJob", "paddleReplicaSpecs"),
                              ("JAXJob", "jaxReplicaSpecs"))},
    # Kubeflow Trainer: the runtimes hold the JobSet template a TrainJob's pods come from
    **{("trainer.kubeflow.org", kind): (_template(
        "spec", "template", "spec", "replicatedJobs", ANY, "template", "spec", "template"),)
       for kind in ("TrainingRuntime", "ClusterTrainingRuntime")},
    # Ray
    ("ray.io", "RayCluster"): tuple(_template("spec", *group, "template")
                                    for group in _RAY_CLUSTER),
    ("ray.io", "RayJob"): (*(_template("spec", "rayClusterSpec", *group, "template")
                             for group in _RAY_CLUSTER),
                           _template("spec", "submitterPodTemplate")),
    ("ray.io", "RayService"): tuple(_template("spec", "rayClusterConfig", *group, "template")
                                    for group in _RAY_CLUSTER),
    # JobSet and LeaderWorkerSet
    ("jobset.x-k8s.io", "JobSet"): (
        _template("spec", "replicatedJobs", ANY, "template", "spec", "template"),),
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): (
        _template("spec", "leaderWorkerTemplate", "leaderTemplate"),
        _template("spec", "leaderWorkerTemplate", "workerTemplate")),
    # Volcano: each task's template
    ("batch.volcano.sh", "Job"): (_template("spec", "tasks", ANY, "template"),),
    # KAITO: a Workspace keeps its fields at the top level; inference.template is the pod
    # template of a model it has no preset for
    ("kaito.sh", "Workspace"): (_template("inference", "template"),),
    # Kueue's AppWrapper: the pod templates of the objects it wraps (a Job, a Deployment, a
    # JobSet, a PyTorchJob...), and a wrapped Pod's own spec
    ("workload.codeflare.dev", "AppWrapper"): (*(
        _template("spec", "components", ANY, "template", *inner) for inner in (
            ("spec", "template"),
            ("spec", "replicatedJobs", ANY, "template", "spec", "template"),
            ("spec", "pytorchReplicaSpecs", ANY, "template"),
            ("spec", "headGroupSpec", "template"),
            ("spec", "workerGroupSpecs", ANY, "template"))),
        PodSite(("spec", "components", ANY, "template", "spec"), holder_kind="Pod")),
    # Argo: each template's container or script (a container with a `source`); the
    # template itself holds the pod-level fields (securityContext, tolerations)
    **{("argoproj.io", kind): (PodSite((*where, "templates", ANY), "inline",
                                       ("container", "script"), "template", "main",
                                       ("metadata", "labels"), where, True,
                                       ("podSpecPatch",)),)
       for kind, where in (("Workflow", ("spec",)), ("WorkflowTemplate", ("spec",)),
                           ("ClusterWorkflowTemplate", ("spec",)),
                           ("CronWorkflow", ("spec", "workflowSpec")))},
    # AIBrix (orchestration.aibrix.ai/v1alpha1, read in vllm-project/aibrix's
    # config/crd/orchestration/orchestration.aibrix.ai_stormservices.yaml and
    # ..._rayclusterfleets.yaml): a StormService's roleSet template holds a PodTemplateSpec per
    # role (prefill, decode, routing); a RayClusterFleet's template is a RayCluster spec
    ("orchestration.aibrix.ai", "StormService"): (
        _template("spec", "template", "spec", "roles", ANY, "template"),),
    ("orchestration.aibrix.ai", "RayClusterFleet"): tuple(
        _template("spec", "template", "spec", *group, "template") for group in _RAY_CLUSTER),
    # OME (ome.io/v1beta1, read in sgl-project/ome's config/crd/full/ome.io_inferenceservices
    # .yaml and pkg/apis/ome/v1beta1): like KServe, each component inlines its pod spec; the
    # engine's, decoder's and router's container is their `runner`, the deprecated predictor's
    # its `model`; OME names that container ome-container and may take its image from the
    # runtime. A multi-node engine's or decoder's leader and worker pods are built from their
    # own pod specs and runners, not the engine's (components/engine.go, reconcilePodSpec)
    ("ome.io", "InferenceService"): (
        PodSite(("spec", "predictor"), "inline", ("model",), model_name=OME_CONTAINER),
        PodSite(("spec", "predictor", "workerSpec"), "inline"),
        *_ome_components("engine", "decoder", "router")),
    # OME's serving runtimes (ome.io/v1beta1, pkg/apis/ome/v1beta1/servingruntime_types.go):
    # like KServe's, the spec inlines a pod spec (`containers`) and `workers` another; and
    # engineConfig, decoderConfig and routerConfig each inline one around its runner, as an
    # InferenceService's components do
    # (a spec or workers without containers makes no pod of its own)
    **{("ome.io", kind): (
        PodSite(("spec",), "inline", only_with_containers=True),
        PodSite(("spec", "workers"), "inline", only_with_containers=True),
        *_ome_components("engineConfig", "decoderConfig", "routerConfig"))
       for kind in ("ServingRuntime", "ClusterServingRuntime")},
    # NVIDIA Dynamo, NVIDIA's NIM operator, KubeAI and llm-d: no pod template; each operator
    # composes the pods from fields of its own, read by webhook.engine.workload.composed as the pod
    # specs they become (a Dynamo graph's services, an llm-d ModelService's roles)
    ("nvidia.com", "DynamoGraphDeployment"): (PodSite(("spec", "services", ANY), "composed"),),
    ("apps.nvidia.com", "NIMService"): (PodSite(("spec",), "composed"),),
    ("kubeai.org", "Model"): (PodSite(("spec",), "composed"),),
    ("llm-d.ai", "ModelService"): tuple(PodSite(("spec", role), "composed")
                                        for role in ("prefill", "decode", "endpointPicker")),
    # Dynamic Resource Allocation: no pod spec, judged by the GPU claim policy
    ("resource.k8s.io", "ResourceClaimTemplate"): (),
    ("resource.k8s.io", "ResourceClaim"): (),
}
# Kinds whose pod specs need more than reading (shared fields, specs that make no pod).
_SHAPED = frozenset(key for key, sites in WORKLOAD_KINDS.items()
                    if any(site.shared or site.only_with_containers for site in sites))
# Fields of a pod spec quickq-guard cannot see through, and why: said in the verdict.
UNSEEN_FIELDS = {
    "podSpecPatch": "a patch Argo applies to the pod at run time, which quickq-guard does "
                    "not judge",
}
# Kinds that look like workloads but carry no pod template, and why they are not judged.
NOT_JUDGED = {
    ("trainer.kubeflow.org", "TrainJob"): "a TrainJob carries no pod template: its pods come "
    "from its TrainingRuntime or ClusterTrainingRuntime, which quickq-guard judges as this "
    "TrainJob runs it (its resourcesPerNode, image and env) when both are in the input",
    # Spark sets the driver's and executors' image, resources and env from spec.driver and
    # spec.executor (SparkPodSpec: cores, memory, gpu...), overwriting a pod template's;
    # judged as a pod spec, it would be judged wrong.
    **{("sparkoperator.k8s.io", kind): "Spark builds its driver and executor pods from "
       "spec.driver and spec.executor, whose fields (image, cores, memory, gpu) are Spark's, "
       "not a pod spec's, and override a pod template's; quickq-guard judges the Pods Spark "
       "creates, when they are created"
       for kind in ("SparkApplication", "ScheduledSparkApplication")},
}
MAX_PROBLEMS = schema.MAX_PROBLEMS
# How a skip reason starts to say the kind looks like a typo of a judged one.
UNKNOWN_KIND = "quickq-guard knows no kind"
# The one apiVersion that serves each built-in kind judged, by (API group, kind).
SERVED_API_VERSIONS = {(api_group(key.split()[0]), key.split()[1]): key.split()[0]
                       for key in KINDS}
CONTAINER_GROUPS = ("containers", "initContainers", "ephemeralContainers")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# A NodeTemplate keeps its probes under spec.health; the spec itself is the container.
NODE_TEMPLATE_PROBES = {"livenessProbe": "liveness", "readinessProbe": "readiness",
                        "startupProbe": "startup"}
# Resources any container may ask for; every other name (nvidia.com/gpu, hugepages-2Mi) is an
# extended resource, and only a container with one can use a GPU.
CORE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_EMPTY: Mapping[str, Any] = {}
_LABELS = {"containers": "container", "initContainers": "initContainer",
           "ephemeralContainers": "ephemeralContainer", "model": "model",
           "runner": "container", "template": "container"}


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """One claim a container consumes: the pod's entry for it, what that entry names, and
    the device classes found (None: the claim or template cannot be resolved)."""

    name: str  # resources.claims[].name, the pod's spec.resourceClaims[].name
    kind: str  # ResourceClaim | ResourceClaimTemplate; "" when the pod lists no such entry
    source: str  # the claim's or the template's name
    classes: tuple[str, ...] | None
    path: Path  # the pod's spec.resourceClaims[i]
    where: str = ""  # where it was looked up: the lookup's `where`


class InvalidObject(ValueError):
    """The object cannot be judged: not a mapping, no kind, a field of the wrong type."""


class RefusedObject(InvalidObject):
    """The Kubernetes API server would refuse the object: an apiVersion it no longer serves,
    a field it does not know, a value of the wrong type. `problems` holds (field, problem)."""

    def __init__(self, problems: Sequence[schema.Problem]) -> None:
        self.problems = tuple(problems[:MAX_PROBLEMS])
        shown = [f"{dotted(path)}: {problem}" for path, problem in self.problems]
        if len(problems) > MAX_PROBLEMS:
            shown.append("and more")
        super().__init__("; ".join(shown))


@dataclass(slots=True)
class Container:
    """One container (or a NodeTemplate's spec) and where it lives in the object.

    Container, PodSpec and Workload are built for one evaluation and never changed after;
    they are not frozen dataclasses, whose __init__ alone cost a tenth of an evaluation."""

    name: str
    # containers | initContainers | ephemeralContainers | model | runner | template |
    # nodeTemplate
    group: str
    path: Path
    data: Mapping[str, Any]
    # resources.requests and resources.limits (empty when missing), checked while the
    # container is read. A manifest's keys may be any YAML scalar (`1: 100m`), not only strings.
    requests: Mapping[Any, Any] = field(repr=False, compare=False)
    limits: Mapping[Any, Any] = field(repr=False, compare=False)
    # Which pod spec it is in, when the workload has several (pytorchReplicaSpecs.Worker).
    pod: str = ""
    # The DRA claims it consumes, resolved (webhook.engine.claims.with_claims); empty until
    # then, and for almost every container.
    claims: tuple[ClaimUse, ...] = field(default=(), repr=False, compare=False)
    # Where a kind whose operator composes the container (webhook.engine.workload.composed)
    # writes its fields: a prefix of a field's path in the container -> the object's path for it (an
    # env entry from the service's `envs`, Dynamo's resources.limits.gpu for
    # resources.limits[nvidia.com/gpu]). The longest prefix wins; unmapped, below `path`.
    fields: Mapping[Path, Path] | None = field(default=None, repr=False, compare=False)
    # Fields the operator fills from elsewhere when the object leaves them out (its own
    # configuration, a base template): their absence here is no fault.
    elsewhere: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # The object it is judged as run by, when another object completes it (a Trainer
    # runtime's `node` container as a TrainJob runs it: webhook.engine.trainjobs).
    run_by: str = ""

    @property
    def label(self) -> str:
        if self.group == "nodeTemplate":
            return "spec"
        where = f" in {self.pod}" if self.pod else ""
        by = f" as {self.run_by} runs it" if self.run_by else ""
        return f"{_LABELS[self.group]} '{self.name}'{where}{by}"

    @property
    def key(self) -> str:
        """The container's name, with its pod spec's when the workload has several: what an
        UPDATE compares with the old object's findings."""
        key = f"{self.name} in {self.pod}" if self.pod else self.name
        return f"{key} by {self.run_by}" if self.run_by else key

    def field_path(self, *names: str | int) -> Path:
        """The path of a field of this container; a probe name maps to spec.health.* in a
        NodeTemplate."""
        if self.group == "nodeTemplate" and names and names[0] in NODE_TEMPLATE_PROBES:
            return (*self.path, "health", NODE_TEMPLATE_PROBES[str(names[0])], *names[1:])
        if self.fields:
            return _mapped(self.fields, names) or (*self.path, *names)
        return (*self.path, *names)

    def probe(self, name: str) -> Mapping[str, Any] | None:
        """The probe, or None; read_workload made sure it is a mapping."""
        if self.group == "nodeTemplate":
            health = self.data.get("health") or _EMPTY
            return health.get(NODE_TEMPLATE_PROBES[name])
        return self.data.get(name)

    @property
    def security_context(self) -> Mapping[str, Any]:
        return self.data.get("securityContext") or _EMPTY


@dataclass(slots=True)
class PodSpec:
    """One pod spec of a workload (a NodeTemplate's spec stands in for one) and its paths."""

    path: Path
    data: Mapping[str, Any]
    containers: tuple[Container, ...]
    # What a change of rolls out new pods: the PodTemplateSpec, or the pod spec itself.
    template_path: Path
    # Where the pods' labels are: metadata.labels of the object or of the pod template, or a
    # KServe component's `labels`.
    labels_path: Path
    security_context: Mapping[str, Any]  # the pod-level one; empty in a NodeTemplate
    # As Container.fields and Container.elsewhere, for the pod-level fields of a composed
    # kind (NIM's spec.userID for securityContext.runAsUser).
    fields: Mapping[Path, Path] | None = field(default=None, repr=False, compare=False)
    elsewhere: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    # The pods' labels when an operator composes them (a NIMService's own and the
    # operator's), instead of those at labels_path.
    labels: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def field_path(self, *names: str | int) -> Path:
        """The path of a pod-level field (tolerations, securityContext.runAsUser)."""
        if self.fields:
            return _mapped(self.fields, names) or (*self.path, *names)
        return (*self.path, *names)


def _mapped(fields: Mapping[Path, Path], names: Path) -> Path | None:
    """The object's path of a field whose longest prefix `fields` maps, or None."""
    for size in range(len(names), 0, -1):
        where = fields.get(names[:size])
        if where is not None:
            return (*where, *names[size:])
    return None


@dataclass(slots=True)
class Workload:
    """The parts of an object that rules judge."""

    obj: Mapping[str, Any]
    kind: str
    pod_specs: tuple[PodSpec, ...]
    containers: tuple[Container, ...]  # every container of every pod spec
    labels: Mapping[str, Any]  # the object's own metadata.labels
    # A ResourceClaim or ResourceClaimTemplate: no pods, devices to judge.
    is_claim: bool = False
    # What its pod specs hold that quickq-guard cannot judge, said as warnings (podSpecPatch).
    unseen: tuple[str, ...] = ()
    # A ConfigMap: no pods, its data judged by no-plaintext-secrets.
    is_config_map: bool = False
    # Why mutate policies leave it alone: an operator composes its pods from its fields
    # (webhook.engine.workload.composed), so the pods are patched where they are created.
    unpatched: str = ""

    @property
    def is_node_template(self) -> bool:
        return self.kind == "NodeTemplate"

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod"


def read_workload(obj: Any, node_template_groups: Sequence[str], *,
                  custom_kinds: Mapping[tuple[str, str], tuple[PodSite, ...]] | None = None,
                  check: bool = True, decoded: bool = False,
                  checked: bool = False) -> Workload | None:
    """The workload view of an object, or None for a kind quickq-guard does not judge.

    `custom_kinds` adds kinds by (API group, kind). Raises RefusedObject when the API server
    would refuse the object (a removed apiVersion; an unknown field or a value of the wrong
    type in a built-in kind, or in the pod templates of the others), and InvalidObject,
    naming the field, when a field rules rely on has the wrong type. `check=False` skips the
    API server's checks, for objects it has accepted already (an UPDATE's old object) or that
    only quickq-guard's own patches changed. `decoded=True` says the API server has decoded
    the object into its own type already (the webhook's objects), so a built-in kind's schema
    is not checked again; the pod templates of other kinds still are. `checked=True` says the
    whole object has been checked against its kind's schema already (webhook.engine.normalize
    checks as it normalizes), so the types rules rely on need no guard either.
    """
    if not schema.is_mapping(obj):
        raise InvalidObject(f"expected a Kubernetes object (a mapping), got {_type(obj)}")
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        raise InvalidObject("the object has no 'kind'")
    if not isinstance(api_version, str) or not api_version:
        raise InvalidObject(f"the {kind} has no 'apiVersion'")
    group = api_group(api_version)
    guard = not checked and (decoded or not check)
    checked = check and _refusals(obj, kind, api_version, decoded or checked)
    metadata = _mapping(obj.get("metadata"), ("metadata",))
    labels = _mapping(metadata.get("labels"), ("metadata", "labels"))
    if kind == "ConfigMap" and group == "":  # judged by no-plaintext-secrets, for its data
        return Workload(obj, kind, (), (), labels, is_config_map=True)
    if kind == "NodeTemplate":
        if group not in node_template_groups:
            return None
        spec = _mapping(obj.get("spec"), ("spec",))
        container = _container(spec, "nodeTemplate", ("spec",), "spec")
        pod = PodSpec(("spec",), spec, (container,), ("spec",), ("metadata", "labels"), _EMPTY)
        return Workload(obj, kind, (pod,), (container,), labels)
    sites = WORKLOAD_KINDS.get((group, kind))
    if sites is None and custom_kinds:
        sites = custom_kinds.get((group, kind))
    if sites is None:
        return None
    if not sites:  # ResourceClaim(Template): nothing but the object to judge
        return Workload(obj, kind, (), (), labels, is_claim=True)
    found = [(site, path, data) for site in sites for path, data in _expand(obj, site.path)
             if not site.holder_kind or _holder_kind(obj, path) == site.holder_kind]
    if sites and not found and (group, kind) not in SERVED_API_VERSIONS:
        return None  # a kind of another project without its pod templates: see not_judged
    if sites[0].style == "composed":
        from webhook.engine.workload.composed import composed

        return composed(obj, group, kind, [(path, data) for _, path, data in found], labels)
    if check and not checked:
        problems: list[schema.Problem] = []
        for site, path, _ in found:
            _check_site(obj, site, path, problems)
        if problems:
            raise RefusedObject(problems)
    # Checked against the Kubernetes schema, the pod specs hold the types rules rely on;
    # otherwise their types are checked as they are read (a review may not come from the
    # API server at all).
    pods = [_pod_spec(data, site, path, guard) for site, path, data in found]
    unseen: tuple[str, ...] = ()
    if (group, kind) in _SHAPED:
        unseen = tuple(f"{dotted((*path, name))} is not judged: {UNSEEN_FIELDS[name]}"
                       for site, path, data in found for name in site.unseen if name in data)
        pods = [_shared(obj, site, pod) for (site, _, _), pod in zip(found, pods, strict=True)
                if pod.containers or not site.only_with_containers]
        if len(pods) != 1:
            pods = [_named(pod) for pod in pods]
        containers = tuple(container for pod in pods for container in pod.containers)
        return Workload(obj, kind, tuple(pods), containers, labels, unseen=unseen)
    if (group, kind) in TRAINER_RUNTIMES:
        return _trainer_runtime(obj, kind, pods, labels)
    if len(pods) == 1:
        return Workload(obj, kind, (pods[0],), pods[0].containers, labels)
    pods = [_named(pod) for pod in pods]
    containers = tuple(container for pod in pods for container in pod.containers)
    return Workload(obj, kind, tuple(pods), containers, labels)


# Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): the trainer container of a runtime is
# named `node`, and each TrainJob that runs the runtime sets its resources (webhook.engine.
# trainjobs judges it with them).
TRAINER_RUNTIMES = frozenset({("trainer.kubeflow.org", "TrainingRuntime"),
                              ("trainer.kubeflow.org", "ClusterTrainingRuntime")})
TRAINER_NODE = "node"


def _trainer_runtime(obj: Mapping[str, Any], kind: str, pods: list[PodSpec],
                     labels: Mapping[str, Any]) -> Workload:
    """A Trainer runtime: its pod specs, each named by its replicated job's path from the
    object's root (`spec.template.spec.replicatedJobs[1]`, the convention its findings' fields
    use); a `node` container without resources has them from its TrainJobs, with which
    webhook.engine.trainjobs judges it."""
    pods = [replace(pod, containers=tuple(
        replace(container,
                pod=dotted(pod.template_path[:5]) if len(pods) != 1 else container.pod,
                elsewhere=_FROM_TRAIN_JOB if _node_without_resources(container)
                else container.elsewhere)
        for container in pod.containers)) for pod in pods]
    containers = tuple(container for pod in pods for container in pod.containers)
    return Workload(obj, kind, tuple(pods), containers, labels)


_FROM_TRAIN_JOB = frozenset({"resources"})


def _node_without_resources(container: Container) -> bool:
    return container.name == TRAINER_NODE and container.group == "containers" \
        and not container.requests and not container.limits


def _shared(obj: Mapping[str, Any], site: PodSite, pod: PodSpec) -> PodSpec:
    """The pod spec with the securityContext its object sets for every pod, when it sets
    none of its own."""
    if site.shared is None or pod.security_context:
        return pod
    shared = _dig(obj, site.shared) or _EMPTY
    context = _mapping(shared.get("securityContext"), site.shared, "securityContext")
    return replace(pod, security_context=context) if context else pod


def _named(pod: PodSpec) -> PodSpec:
    """The pod spec with its containers labelled by where it is (pytorchReplicaSpecs.Worker,
    predictor, workerGroupSpecs[0]), so messages tell one pod spec's containers from
    another's."""
    template = pod.template_path
    start = 1 if template[:1] == ("spec",) and len(template) > 1 else 0
    end = len(template) - 1 if template[-1:] == ("template",) else len(template)
    name = dotted(template[start:end])
    containers = tuple(replace(container, pod=name) for container in pod.containers)
    return replace(pod, containers=containers)


def _pod_spec(data: Mapping[str, Any], site: PodSite, path: Path, guard: bool) -> PodSpec:
    """The pod spec's view; `guard`: check the types rules rely on (an object the Kubernetes
    schema check has not seen)."""
    containers: list[Container] = []
    for container_group in CONTAINER_GROUPS:
        items = data.get(container_group)
        if items is None:
            continue
        list_path = (*path, container_group)
        if guard and not isinstance(items, list):
            raise InvalidObject(f"{dotted(list_path)}: expected a list, got {_type(items)}")
        for index, item in enumerate(items):
            item_path = (*list_path, index)
            if guard and not isinstance(item, Mapping):
                raise InvalidObject(f"{dotted(item_path)}: expected a mapping, got {_type(item)}")
            name = item.get("name")
            label = name if isinstance(name, str) and name else f"#{index}"
            containers.append(_container(item, container_group, item_path, label, guard))
    for model in site.models:
        spec = data.get(model)
        if spec is not None:
            item_path = (*path, model)
            spec = _mapping(spec, item_path)
            name = spec.get("name")
            label = name if isinstance(name, str) and name else site.model_name
            containers.append(_container(spec, site.model_group, item_path, label, guard))
    if guard:
        security_context = _mapping(data.get("securityContext"), path, "securityContext")
        _list_of_mappings(data.get("tolerations"), path, "tolerations")
    else:
        security_context = data.get("securityContext") or _EMPTY
    if site.style == "template":
        template = path[:-1]
        labels_path: Path = (*template, "metadata", "labels")
    elif site.style == "inline":
        template, labels_path = path, (*path, *site.labels)
    else:
        template, labels_path = path, ("metadata", "labels")
    return PodSpec(path, data, tuple(containers), template, labels_path, security_context)


def _holder_kind(obj: Mapping[str, Any], path: Path) -> object:
    """The kind of the object a pod spec at `path` is the spec of."""
    holder = _dig(obj, path[:-1])
    return holder.get("kind") if holder is not None else None


def _expand(obj: Mapping[str, Any], pattern: Path) -> list[tuple[Path, Mapping[str, Any]]]:
    """(path, value) of each mapping the pattern reaches; ANY stands for every key of a
    mapping or item of a list. A missing level yields nothing."""
    if ANY not in pattern:  # Pods and controllers: one pod spec, or none
        found = _dig(obj, pattern)
        return [] if found is None else [(pattern, found)]
    here = pattern.index(ANY)
    holder = _dig(obj, pattern[:here - 1])
    parent = holder.get(str(pattern[here - 1])) if holder is not None and here else None
    if parent is None:
        return []
    items: Any
    if isinstance(parent, list):
        items = enumerate(parent)
    elif isinstance(parent, Mapping):
        items = parent.items()
    else:
        raise InvalidObject(f"{dotted(pattern[:here])}: expected a list or a mapping, got "
                            f"{_type(parent)}")
    rest = pattern[here + 1:]
    expanded = []
    for key, item in items:
        if item is None:
            continue
        where = (*pattern[:here], key)
        expanded += [((*where, *path), value)
                     for path, value in _expand(_mapping(item, where), rest)]
    return expanded


def _check_site(obj: Mapping[str, Any], site: PodSite, path: Path,
                problems: list[schema.Problem]) -> None:
    """What the API server would refuse in a pod spec of a kind whose own schema quickq-guard
    does not carry: the whole pod template (the CRDs embed Kubernetes' own), or an inline pod
    spec's known fields, its containers and its model specs."""
    if site.holder_kind:  # a wrapped object's spec: its kind's own schema, as it is created
        holder = _dig(obj, path[:-1]) or _EMPTY
        node = schema.object_type(str(holder.get("apiVersion")), site.holder_kind)
        schema.check(holder if node else _dig(obj, path), node or schema.POD_SPEC,
                     path[:-1] if node else path, problems)
        return
    if site.style == "template":
        schema.check(_dig(obj, path[:-1]), schema.POD_TEMPLATE, path[:-1], problems)
        return
    data = _dig(obj, path)
    schema.check(data, schema.POD_SPEC_LENIENT, path, problems)
    for model in site.models:
        if isinstance(data, Mapping) and data.get(model) is not None:
            schema.check(data[model], schema.CONTAINER_LENIENT, (*path, model), problems)


def _refusals(obj: Mapping[str, Any], kind: str, api_version: str, decoded: bool) -> bool:
    """Raise RefusedObject for what the API server would refuse: a removed apiVersion, and in
    a built-in kind, the whole object (unless the API server has `decoded` it already). True
    when the whole object was checked."""
    unserved = unserved_api_version(api_version, kind)
    if unserved:
        raise RefusedObject([(("apiVersion",), unserved)])
    node = schema.object_type(api_version, kind)
    if node is None:
        return False
    if decoded:
        return True
    problems: list[schema.Problem] = []
    schema.check(obj, node, (), problems)
    if problems:
        raise RefusedObject(problems)
    return True


def unserved_api_version(api_version: str, kind: str) -> str:
    """Why the API server serves no such apiVersion of a kind it knows, or '' (a removed
    one, or one it never served)."""
    removed = schema.removed_api_version(api_version, kind)
    if removed:
        return removed
    served = SERVED_API_VERSIONS.get((api_group(api_version), kind))
    if served and schema.object_type(api_version, kind) is None:
        return f"apiVersion {api_version} does not serve {kind}; use apiVersion {served}"
    return ""


def not_judged(obj: Mapping[str, Any],
               custom_kinds: Mapping[tuple[str, str], tuple[PodSite, ...]] | None = None) -> str:
    """Why quickq-guard does not judge an object of this kind, naming the kind with its API
    group (a Job of batch.volcano.sh is not a batch/v1 Job); a near miss of a kind judged in
    the same group (`Deploymnet` in apps) is named, and so are pod templates a judged kind
    keeps elsewhere than the object has them; a kind of another project's API group is told
    that customKinds can have it judged."""
    kind = str(obj.get("kind"))
    group = api_group(str(obj.get("apiVersion")))
    named = f"kind {kind} ({group})" if group else f"kind {kind}"
    reason = NOT_JUDGED.get((group, kind))
    if reason:
        return f"{named} is not judged: {reason}"
    custom_kinds = custom_kinds or {}
    sites = WORKLOAD_KINDS.get((group, kind)) or custom_kinds.get((group, kind))
    if sites:
        where = ", ".join(dotted(_template_of(site)) for site in sites)
        return f"{named} is not judged: it has no pod template where {kind} keeps them ({where})"
    judged = [name for known, name in (*WORKLOAD_KINDS, *custom_kinds) if known == group]
    guess = difflib.get_close_matches(kind, judged, n=1, cutoff=0.8)
    if guess and guess[0] != kind:
        return f"{named} is not judged: {UNKNOWN_KIND} {kind}; did you mean {guess[0]}?"
    if not _kubernetes_group(group):
        return f"{named} is not judged: {CUSTOM_KIND_HINT}"
    return f"{named} is not judged"


# What the skip of another project's kind says: quickq-guard judges it once told where its
# pod templates are.
CUSTOM_KIND_HINT = ("if it runs pods, name it in the config's customKinds with the paths of "
                    "its pod templates")


def _kubernetes_group(group: str) -> bool:
    """Whether an API group is one of Kubernetes' own (core, apps, batch, policy,
    rbac.authorization.k8s.io...), whose kinds quickq-guard judges if they run pods; a CRD's
    group has a dot (jobset.x-k8s.io, example.com)."""
    return "." not in group or (group.endswith(".k8s.io") and not group.endswith(".x-k8s.io"))


def _template_of(site: PodSite) -> Path:
    """How a message names a pod-spec site: spec.workers[*].template."""
    return site.path[:-1] if site.style == "template" else site.path


def _container(data: Mapping[str, Any], group: str, path: Path, name: str,
               guard: bool = True) -> Container:
    get = data.get
    if not guard:
        resources = get("resources") or _EMPTY
        return Container(name, group, path, data, resources.get("requests") or _EMPTY,
                         resources.get("limits") or _EMPTY)
    resources = _mapping(get("resources"), path, "resources")
    requests = _mapping(resources.get("requests"), path, "resources", "requests")
    limits = _mapping(resources.get("limits"), path, "resources", "limits")
    _list_of_mappings(get("env"), path, "env")
    if group == "nodeTemplate":
        _mapping(get("securityContext"), path, "securityContext")
        health = _mapping(get("health"), path, "health")
        for probe in NODE_TEMPLATE_PROBES.values():
            _mapping(health.get(probe), path, "health", probe)
        _list_of_mappings(get("tolerations"), path, "tolerations")
    else:
        for field_name in _CONTAINER_FIELDS:
            value = get(field_name)
            if value is not None and value.__class__ is not dict:  # most are either
                _mapping(value, path, field_name)
    return Container(name, group, path, data, requests, limits)


_CONTAINER_FIELDS = ("securityContext", *PROBES)


def _dig(obj: Mapping[str, Any], path: Path) -> Mapping[str, Any] | None:
    """The mapping at `path` (an int steps into a list), or None when a level is missing."""
    current: Any = obj
    for depth, name in enumerate(path):
        if isinstance(name, int):
            value = current[name] if name < len(current) else None
        else:
            value = current.get(name)
        if value is None:
            return None  # a missing level: nothing below it either
        following = path[depth + 1] if depth + 1 < len(path) else None
        if not (isinstance(value, list) and isinstance(following, int)):
            _mapping(value, path[: depth + 1])
        current = value
    found: Mapping[str, Any] = current
    return found


def _mapping(value: Any, path: Path, *keys: str | int) -> Mapping[str, Any]:
    """`value` when it is a mapping ({} for None), else InvalidObject naming `path` + `keys`
    (built only then: most objects are well formed)."""
    if value is None:
        return _EMPTY
    if not schema.is_mapping(value):
        raise InvalidObject(f"{dotted((*path, *keys))}: expected a mapping, got "
                            f"{_type(value)}")
    return value


def _list_of_mappings(value: Any, path: Path, *keys: str | int) -> None:
    if value is None:
        return
    if value.__class__ is not list and not isinstance(value, list):
        raise InvalidObject(f"{dotted((*path, *keys))}: expected a list, got {_type(value)}")
    for index, item in enumerate(value):
        if not schema.is_mapping(item):
            raise InvalidObject(f"{dotted((*path, *keys, index))}: expected a mapping, got "
                                f"{_type(item)}")


def _type(value: Any) -> str:
    names = {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
