"""Image pinning: `latest` or no tag makes a rollout unrepeatable and its rollback a guess."""

from __future__ import annotations

from webhook.engine.linear import Pattern
from webhook.engine.results import Finding
from webhook.engine.rules._base import NoParams, finding
from webhook.engine.workload import IMAGE_FROM_RUNTIME, Workload

# `$VLLM_IMAGE`, `${IMAGE}`, `$(IMAGE)`, `{{ .Values.image }}`: a variable that envsubst, a
# script or Helm should have filled in; Kubernetes expands none of them in `image`.
_VARIABLE = Pattern(r"\$\{?\(?[A-Za-z_][A-Za-z0-9_]*|\{\{")


def image_pin_problem(image: str) -> str | None:
    """Why an image reference is not pinned, or None when it is. Not cached: a few string
    methods, linear in the reference, and a cache keyed by references would keep whatever
    an object brings (the API server sets no length on `image`).

    A digest pins it whatever the tag says (app:latest@sha256:...). A registry `host:port` is
    not a tag: the tag is looked for only after the last `/`.
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
    if tag == "latest":
        return "uses the 'latest' tag"
    return None


def disallow_latest_tag(workload: Workload, params: NoParams) -> list[Finding]:
    """Every image (containers, initContainers, ephemeralContainers) has a pinned tag or digest."""
    findings = []
    for container in workload.containers:
        image = container.data.get("image")
        if image is None and container.group in IMAGE_FROM_RUNTIME:
            continue  # a KServe model spec or OME runner runs its serving runtime's image
        if not isinstance(image, str) or not image.strip():
            findings.append(finding(container, "set image to a pinned reference "
                                    "(registry/app:1.2.3 or registry/app@sha256:...)",
                                    container.field_path("image")))
            continue
        if ("$" in image or "{{" in image) and _VARIABLE.search(image):
            findings.append(finding(
                container, f"image '{image}' is an unrendered variable, which Kubernetes does "
                "not expand in image; render the manifest first (envsubst, helm template, "
                "kustomize build) or set a pinned reference (registry/app:1.2.3)",
                container.field_path("image")))
            continue
        problem = image_pin_problem(image)
        if problem:
            repository = image.partition("@")[0]
            if ":" in repository.rsplit("/", 1)[-1]:
                repository = repository.rsplit(":", 1)[0]
            findings.append(finding(
                container,
                f"image '{image}' {problem}; pin it to a version ({repository}:1.2.3) "
                f"or a digest ({repository}@sha256:...)", container.field_path("image")))
    return findings
