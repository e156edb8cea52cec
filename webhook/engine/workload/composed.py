"""Inference kinds with no pod template: each operator composes the pods from fields of its
own, read here as the pod specs they become.

A rule then judges them as any pod spec (image, env, resources with the kind's own GPU
fields, probes, security context), and every finding names the field where the object
writes it (`Container.fields`): a Dynamo service's `resources.limits.gpu`, a NIMService's
`spec.userID`. What the operator fills from elsewhere (its configuration, a base template,
defaults of its own) is not in the object: a container lists those fields in `elsewhere`, so
their absence is no fault, and the workload says in a warning what was not judged. Mutate
policies leave these objects alone (`Workload.unpatched`): the operator writes the pods, and
the objects it creates for them are patched when they are created.

Read from each project's published API (never copied): the CRD version and file are named
at each reader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.engine.patch import Path, dotted
from webhook.engine.schema import Problem, type_name
from webhook.engine.workload import (
    PROBES,
    Container,
    PodSpec,
    RefusedObject,
    Workload,
    _container,
    _list_of_mappings,
    _mapping,
)

Found = Sequence[tuple[Path, Mapping[str, Any]]]
_GPU = "nvidia.com/gpu"  # the resource Dynamo asks for when a service names no gpuType


def composed(obj: Mapping[str, Any], group: str, kind: str, found: Found,
             labels: Mapping[str, Any]) -> Workload:
    """The workload view of a composed kind: the pod spec of each of its sites."""
    operator, read = _READERS[group, kind]
    pods: list[PodSpec] = []
    unseen: dict[str, None] = {}  # said once per object
    for path, data in found:
        pod, note = read(obj, path, data)
        pods.append(pod)
        if note:
            unseen[note] = None
    containers = tuple(container for pod in pods for container in pod.containers)
    reason = (f"{operator} composes the pods from this {kind}'s own fields; mutate policies "
              "patch the objects it creates for them (Deployments, Pods), not this one")
    return Workload(obj, kind, tuple(pods), containers, labels, unseen=tuple(unseen),
                    unpatched=reason)


# --- NVIDIA Dynamo ------------------------------------------------------------------------------
# DynamoGraphDeployment, nvidia.com/v1alpha1: read in ai-dynamo/dynamo's
# deploy/cloud/operator/api/v1alpha1/dynamocomponentdeployment_types.go (the shared spec of
# each spec.services.<name>), api/dynamo/common (ExtraPodSpec: a PodSpec with a
# mainContainer) and internal/dynamo/graph.go (GenerateBasePodSpec) with
# internal/controller_common (GetResourcesConfig). Each service's pods: extraPodSpec as the
# pod spec, its `containers` kept beside the main container; the main container is
# extraPodSpec.mainContainer with the graph's spec.envs and the service's envs over its env
# (the service's win), the service's livenessProbe and readinessProbe replacing its own, and
# the service's resources (cpu, memory, gpu as gpuType or nvidia.com/gpu, custom) over its
# resources. Dynamo's own default probes and base pod settings are not in the object and
# are not judged.

def _dynamo(obj: Mapping[str, Any], path: Path,
            service: Mapping[str, Any]) -> tuple[PodSpec, str]:
    extra_path = (*path, "extraPodSpec")
    extra = _mapping(service.get("extraPodSpec"), path, "extraPodSpec")
    main_path = (*extra_path, "mainContainer")
    main = _mapping(extra.get("mainContainer"), extra_path, "mainContainer")
    data: dict[str, Any] = dict(main)
    fields: dict[Path, Path] = {}
    spec = _mapping(obj.get("spec"), ("spec",))
    env: dict[Any, tuple[Mapping[str, Any], Path]] = {}
    for items, where in ((main.get("env"), (*main_path, "env")),
                         (spec.get("envs"), ("spec", "envs")),
                         (service.get("envs"), (*path, "envs"))):
        _list_of_mappings(items, where)
        for index, entry in enumerate(items or ()):
            env[entry.get("name")] = (entry, (*where, index))
    if env:
        data["env"] = [entry for entry, _ in env.values()]
        fields.update({("env", index): where for index, (_, where) in enumerate(env.values())})
    for probe in ("livenessProbe", "readinessProbe"):
        if service.get(probe) is not None:
            data[probe] = _mapping(service[probe], path, probe)
            fields[(probe,)] = (*path, probe)
    resources = _dynamo_resources(main, main_path, service, path, fields)
    if resources:
        data["resources"] = resources
    own = main.get("name")
    name = own if isinstance(own, str) and own else "main"  # Dynamo's name for it
    data["name"] = name
    label = dotted(path[1:])
    container = replace(_container(data, "containers", main_path, name), fields=fields,
                        pod=label)
    side = _containers(extra, extra_path, "containers", label)
    inits = _containers(extra, extra_path, "initContainers", label)
    pod_data = {key: value for key, value in extra.items() if key != "mainContainer"}
    pod_data["containers"] = [*(c.data for c in side), data]
    security = _mapping(extra.get("securityContext"), extra_path, "securityContext")
    return PodSpec(extra_path, pod_data, (*side, container, *inits), path, (*path, "labels"),
                   security), ""


def _dynamo_resources(main: Mapping[str, Any], main_path: Path, service: Mapping[str, Any],
                      path: Path, fields: dict[Path, Path]) -> dict[str, Any]:
    """The main container's resources: its own, with the service's over them, each amount
    mapped to the field that wrote it. An amount missing from both belongs in the service's
    resources, where Dynamo's users write them."""
    own = _mapping(main.get("resources"), main_path, "resources")
    theirs = _mapping(service.get("resources"), path, "resources")
    resources: dict[str, Any] = dict(own)
    fields[("resources",)] = (*path, "resources")
    for which in ("requests", "limits"):
        amounts = dict(_mapping(own.get(which), main_path, "resources", which))
        for name in amounts:
            fields[("resources", which, name)] = (*main_path, "resources", which, name)
        item = _mapping(theirs.get(which), path, "resources", which)
        gpu_type = item.get("gpuType")
        gpu = gpu_type if isinstance(gpu_type, str) and gpu_type else _GPU
        for field_name, resource in (("cpu", "cpu"), ("memory", "memory"), ("gpu", gpu)):
            if item.get(field_name) not in (None, ""):
                amounts[resource] = item[field_name]
                fields[("resources", which, resource)] = (*path, "resources", which,
                                                          field_name)
        fields.setdefault(("resources", which, gpu), (*path, "resources", which, "gpu"))
        custom = _mapping(item.get("custom"), path, "resources", which, "custom")
        for resource, amount in custom.items():
            amounts[resource] = amount
            fields[("resources", which, resource)] = (*path, "resources", which, "custom",
                                                      resource)
        if amounts:
            resources[which] = amounts
    return resources


def _containers(pod: Mapping[str, Any], path: Path, group: str, label: str,
                elsewhere: frozenset[str] = frozenset()) -> list[Container]:
    """The containers of a list in the object as they are, at their own paths."""
    items = pod.get(group)
    _list_of_mappings(items, path, group)
    found = []
    for index, item in enumerate(items or ()):
        name = item.get("name")
        own = name if isinstance(name, str) and name else f"#{index}"
        container = _container(item, group, (*path, group, index), own)
        found.append(replace(container, pod=label, elsewhere=elsewhere))
    return found


# --- NVIDIA NIM operator ------------------------------------------------------------------------
# NIMService, apps.nvidia.com/v1alpha1: read in NVIDIA/k8s-nim-operator's
# config/crd/bases/apps.nvidia.com_nimservices.yaml, api/apps/v1alpha1/nimservice_types.go
# (GetImage, GetUserID, IsProbeEnabled, GetDeploymentParams) and manifests/deployment.yaml.
# The main container runs spec.image as repository:tag with spec.command, args, env and
# resources; each probe is {enabled, probe}: off when enabled is false, the operator's own
# default when no probe is given (not judged); the pod runs as spec.userID (1000 when unset)
# and spec.groupID, with the spec's tolerations, priorityClassName, nodeSelector and
# runtimeClassName. spec.initContainers and spec.sidecarContainers name an image, command,
# args and env only: their resources are the operator's, not judged.
_NIM_POD_FIELDS = ("tolerations", "priorityClassName", "nodeSelector", "runtimeClassName",
                   "schedulerName", "affinity")
NIM_DEFAULT_USER = 1000  # GetUserID's default: the pods run as uid 1000 unless told otherwise


def _nim(obj: Mapping[str, Any], path: Path, spec: Mapping[str, Any]) -> tuple[PodSpec, str]:
    metadata = _mapping(obj.get("metadata"), ("metadata",))
    name = f"{metadata.get('name') or 'nimservice'}-ctr"
    data: dict[str, Any] = {"name": name}
    fields: dict[Path, Path] = {}
    image = _nim_image(spec.get("image"), (*path, "image"))
    if image is not None:
        data["image"] = image
    fields[("image",)] = (*path, "image")
    for key in ("command", "args", "env", "resources"):
        if spec.get(key) is not None:
            data[key] = spec[key]
    for probe in PROBES:
        switch = _mapping(spec.get(probe), path, probe)
        fields[(probe,)] = (*path, probe, "probe")
        if switch.get("enabled") is not False and switch.get("probe") is not None:
            data[probe] = _mapping(switch["probe"], path, probe, "probe")
    main = replace(_container(data, "containers", path, name), fields=fields)
    sidecars = _nim_containers(spec, path, "sidecarContainers", "containers")
    inits = _nim_containers(spec, path, "initContainers", "initContainers")
    user = spec.get("userID")
    security = {"runAsUser": NIM_DEFAULT_USER if user is None else user}
    if spec.get("groupID") is not None:
        security["runAsGroup"] = spec["groupID"]
    pod_data: dict[str, Any] = {key: spec[key] for key in _NIM_POD_FIELDS
                                if spec.get(key) is not None}
    pod_data.update(containers=[data, *(c.data for c in sidecars)],
                    initContainers=[c.data for c in inits], securityContext=security)
    pod_fields: dict[Path, Path] = {("securityContext", "runAsUser"): (*path, "userID"),
                  ("securityContext", "runAsGroup"): (*path, "groupID")}
    own = _mapping(spec.get("labels"), path, "labels")
    labels = {**_nim_labels(str(metadata.get("name"))), **own}
    return PodSpec(path, pod_data, (main, *sidecars, *inits), path, (*path, "labels"),
                   security, fields=pod_fields, labels=labels), ""


def _nim_labels(name: str) -> dict[str, str]:
    """The labels the operator gives every pod of a NIMService (GetSelectorLabels,
    GetStandardLabels), under spec.labels."""
    return {"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/instance": name,
            "app.kubernetes.io/part-of": "nim-service",
            "app.kubernetes.io/managed-by": "k8s-nim-operator"}


def _nim_image(value: Any, path: Path) -> str | None:
    """A NIM image {repository, tag} as the operator writes it into the pod: repository:tag.
    Both are strings in the CRD's schema: `tag: 1.8` (a number in YAML) is refused by the
    API server, and so it is here, naming the field."""
    image = _mapping(value, path)
    repository, tag = image.get("repository"), image.get("tag")
    problems: list[Problem] = [
        ((*path, key), f"expected a string, got {type_name(found)} (quote the value)")
        for key, found in (("repository", repository), ("tag", tag))
        if found is not None and not isinstance(found, str)]
    if problems:
        raise RefusedObject(problems)
    if not repository:
        return None
    return f"{repository}:{tag or ''}"


def _nim_containers(spec: Mapping[str, Any], path: Path, key: str,
                    group: str) -> list[Container]:
    items = spec.get(key)
    _list_of_mappings(items, path, key)
    found = []
    for index, item in enumerate(items or ()):
        where = (*path, key, index)
        data = {field: item[field] for field in ("name", "command", "args", "env",
                                                 "workingDir") if item.get(field) is not None}
        image = _nim_image(item.get("image"), (*where, "image"))
        if image is not None:
            data["image"] = image
        name = data.get("name")
        own = name if isinstance(name, str) and name else f"#{index}"
        container = _container(data, group, where, own)
        found.append(replace(container, elsewhere=frozenset({"resources"})))
    return found


# --- KubeAI -------------------------------------------------------------------------------------
# Model, kubeai.org/v1: read in kubeai-project/kubeai's manifests/crds/kubeai.org_models.yaml
# and api/k8s/v1/model_types.go. A Model names its server's image (optional: KubeAI's
# configuration picks one per engine and resource profile), args, env (a map of name to
# value) and priorityClassName; its requests, limits, GPUs, node selector and tolerations
# come from the resource profile (spec.resourceProfile, `nvidia-gpu-l4:1`) defined in
# KubeAI's configuration, and its probes and security context from KubeAI itself. Judged:
# the image, env and args; the rest is said in a warning.
KUBEAI_CONTAINER = "server"  # the name KubeAI gives a model server's container


def _kubeai(obj: Mapping[str, Any], path: Path,
            spec: Mapping[str, Any]) -> tuple[PodSpec, str]:
    data: dict[str, Any] = {"name": KUBEAI_CONTAINER}
    fields: dict[Path, Path] = {("image",): (*path, "image"), ("args",): (*path, "args")}
    for key in ("image", "args"):
        if spec.get(key) is not None:
            data[key] = spec[key]
    env = _mapping(spec.get("env"), path, "env")
    if env:
        data["env"] = [{"name": str(name), "value": value} for name, value in env.items()]
        for index, name in enumerate(env):
            fields[("env", index)] = fields[("env", index, "value")] = (*path, "env", name)
    container = replace(_container(data, "containers", path, KUBEAI_CONTAINER),
                        fields=fields,
                        elsewhere=frozenset({"image", "resources", "securityContext"}))
    pod_data: dict[str, Any] = {"containers": [data]}
    if spec.get("priorityClassName") is not None:
        pod_data["priorityClassName"] = spec["priorityClassName"]
    profile = spec.get("resourceProfile")
    shown = f" '{profile}'" if isinstance(profile, str) and profile else ""
    # At most 256 characters: the API server cuts a webhook's warning there.
    note = (f"{dotted((*path, 'resourceProfile'))}{shown}: requests, limits, GPUs, "
            "tolerations, probes and security context come from KubeAI's configuration, not "
            "this object: not judged here; the Pods KubeAI creates are judged when created")
    return PodSpec(path, pod_data, (container,), path, (), {}), note


# --- llm-d --------------------------------------------------------------------------------------
# ModelService, llm-d.ai/v1alpha1: read in llm-d/llm-d-model-service's
# config/crd/bases/llm-d.ai_modelservices.yaml and api/v1alpha1/modelservice_types.go.
# spec.prefill, spec.decode and spec.endpointPicker each list containers and initContainers
# of name, image, command, args, env, envFrom and resources, which llm-d merges into the
# Deployments of its base ConfigMap (spec.baseConfigMapRef): the pods' security context,
# tolerations, probes and priority class, and any image or resources a container leaves
# out, come from there. Judged: what the containers write.
_LLMD_ELSEWHERE = frozenset({"image", "resources", "securityContext"})


def _llmd(obj: Mapping[str, Any], path: Path,
          role: Mapping[str, Any]) -> tuple[PodSpec, str]:
    label = dotted(path[1:])  # prefill, decode, endpointPicker
    containers = _containers(role, path, "containers", label, _LLMD_ELSEWHERE)
    inits = _containers(role, path, "initContainers", label, _LLMD_ELSEWHERE)
    pod_data = {"containers": [c.data for c in containers],
                "initContainers": [c.data for c in inits]}
    note = ("spec.baseConfigMapRef: the security context, tolerations, probes, priority "
            "class, and any image or resources a container leaves out come from the base "
            "ConfigMap's Deployments: not judged here; the Deployments llm-d creates are "
            "judged when created")
    return PodSpec(path, pod_data, (*containers, *inits), path, (), {},
                   elsewhere=frozenset({"priorityClassName", "tolerations"})), note


Reader = Callable[[Mapping[str, Any], Path, Mapping[str, Any]], tuple[PodSpec, str]]
_READERS: dict[tuple[str, str], tuple[str, Reader]] = {
    ("nvidia.com", "DynamoGraphDeployment"): ("the Dynamo operator", _dynamo),
    ("apps.nvidia.com", "NIMService"): ("the NIM operator", _nim),
    ("kubeai.org", "Model"): ("KubeAI", _kubeai),
    ("llm-d.ai", "ModelService"): ("llm-d", _llmd),
}
