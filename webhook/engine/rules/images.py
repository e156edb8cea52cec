"""Image pinning: `latest` or no tag makes a rollout unrepeatable and its rollback a guess."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.linear import Pattern
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.workload import IMAGE_FROM_RUNTIME, Workload, dotted

# `$VLLM_IMAGE`, `${IMAGE}`, `$(IMAGE)`, `{{ .Values.image }}`: a variable that envsubst, a
# script or Helm should have filled in; Kubernetes expands none of them in `image`.
_VARIABLE = Pattern(r"\$\{?\(?[A-Za-z_][A-Za-z0-9_]*|\{\{")
# What no image reference holds before its digest (distribution's reference grammar, roughly:
# a registry host[:port], lowercase path components, a tag): a character outside the grammar
# (`<image>`, `my image`), capitals in the image's own name (`MyModel:1`; a tag may have
# them), or a component `your-...` (`your-vllm-image`, `your-registry/app`), a chart's or a
# README's placeholder to fill in. One short regular expression on the name as written, so
# the CEL form stays within Kubernetes' cost limit.
PLACEHOLDER = r"[^A-Za-z0-9._:/\[\]-]|(?:^|/)[^/:]*[A-Z][^/:]*(?::[^/]*)?$|(?:^|/)your(?:[-_.]|$)"
_PLACEHOLDER = Pattern(PLACEHOLDER)


class LatestTagParams(Params):
    # Tags that move like `latest` (main, nightly, dev...): each team says which it uses.
    tags: tuple[str, ...] = ("latest",)


def repository_of(image: str) -> str:
    """The image without its digest and tag: `registry:5000/app` of `registry:5000/app:1`."""
    repository = image.partition("@")[0]
    if ":" in repository.rsplit("/", 1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return repository


def is_placeholder(image: str) -> bool:
    """Whether the image is no reference a runtime could pull: outside the grammar, or a
    placeholder to fill in."""
    return _PLACEHOLDER.search(image.partition("@")[0]) is not None


def image_pin_problem(image: str, moving: tuple[str, ...] = ("latest",)) -> str | None:
    """Why an image reference is not pinned, or None when it is. Not cached: a few string
    methods, linear in the reference, and a cache keyed by references would keep whatever
    an object brings (the API server sets no length on `image`).

    A digest pins it whatever the tag says (app:latest@sha256:...). A registry `host:port` is
    not a tag: the tag is looked for only after the last `/`. `moving`: the tags that move
    like `latest` (the policy's `tags`).
    """
    name, at, digest = image.partition("@")
    if at:
        return None if ":" in digest and digest.split(":", 1)[1] else "has an empty digest"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return "has no tag"
    tag = last.split(":", 1)[1]
    if not tag:
        return "has an empty tag"
    if tag in moving:
        return f"uses the '{tag}' tag"
    return None


def disallow_latest_tag(workload: Workload, params: LatestTagParams) -> list[Finding]:
    """Every image a pod runs or mounts is a reference with a tag other than the moving ones
    (`tags`) or a digest: containers,
    initContainers, ephemeralContainers, and OCI image volumes (`volumes[].image.reference`),
    whose content a container mounts and can run as well."""
    findings = []
    for container in workload.containers:
        image = container.data.get("image")
        if image is None and (container.group in IMAGE_FROM_RUNTIME
                              or "image" in container.elsewhere):
            continue  # a KServe model spec or OME runner runs its serving runtime's image;
            # a composed kind's operator picks one (webhook.engine.workload.composed)
        problem = _image_problem(image, "image", params.tags)
        if problem:
            findings.append(finding(container, problem, container.field_path("image")))
    for pod in workload.pod_specs:
        volumes = pod.data.get("volumes")
        if not volumes or volumes.__class__ is not list:
            continue  # the API server's and the schema check's volumes are a list
        for index, volume in enumerate(volumes):
            if volume.__class__ is not dict or "image" not in volume:
                continue  # another kind of volume (a volume is a mapping, checked already)
            source = volume["image"]
            if not isinstance(source, Mapping):
                continue
            name = volume.get("name")
            label = f"volume '{name if isinstance(name, str) and name else f'#{index}'}'"
            if len(workload.pod_specs) > 1:
                label += f" in {dotted(pod.template_path)}"
            problem = _image_problem(source.get("reference"), "image.reference", params.tags)
            if problem:
                findings.append(finding(None, f"{label}: {problem}",
                                        pod.field_path("volumes", index, "image",
                                                       "reference")))
    return findings


def _image_problem(image: Any, field: str, moving: tuple[str, ...]) -> str:
    """Why an image reference (a container's `image`, a volume's `image.reference`) is not
    pinned, as a message, or '' when it is."""
    if not isinstance(image, str) or not image.strip():
        return (f"set {field} to a pinned reference (registry/app:1.2.3 or "
                "registry/app@sha256:...)")
    if ("$" in image or "{{" in image) and _VARIABLE.search(image):
        return (f"{field} '{image}' is an unrendered variable, which Kubernetes does not "
                f"expand in {field}; render the manifest first (envsubst, helm template, "
                "kustomize build) or set a pinned reference (registry/app:1.2.3)")
    if is_placeholder(image):
        return (f"{field} '{image}' is not an image reference (a placeholder?); set the "
                "image to run, pinned (registry/app:1.2.3 or registry/app@sha256:...)")
    problem = image_pin_problem(image, moving)
    if not problem:
        return ""
    repository = repository_of(image)
    return (f"{field} '{image}' {problem}; pin it to a version ({repository}:1.2.3) "
            f"or a digest ({repository}@sha256:...)")
