"""Kustomize in a directory walk: its patch files are fragments, not objects anyone applies.

A `kustomization.yaml` lists its patches (`patches[].path`, `patchesStrategicMerge[]`,
`patchesJson6902[].path`); judged as whole objects they are denied for the images and
requests the base they patch already has. So a walk skips the files a kustomization beside
or above them lists as patches, saying so, and a lone fragment (a `$patch` directive, no
container with an image) is reported as incomplete rather than denied.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
from itertools import islice
from typing import Any

import orjson

from webhook.engine.schema import is_mapping
from webhook.manifests import read_regular, read_text

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
# Strategic merge patch directives: only a patch has them.
_DIRECTIVES = ("$patch", "$setElementOrder/", "$retainKeys", "$deleteFromPrimitiveList/")
_CONTAINER_LISTS = ("containers", "initContainers")


def is_kustomization(path: str) -> bool:
    return os.path.basename(path) in KUSTOMIZATION_FILES


def listed_patch(path: str) -> str:
    """Where a kustomization names this file as a patch (`overlay/kustomization.yaml lists
    it under patches:`), or '' when none in its folder or the two above does."""
    absolute = os.path.abspath(path)
    folder, shown = os.path.dirname(absolute), os.path.dirname(path)
    if not _patched_near(folder):
        return ""
    for _ in range(3):
        field = _patches(folder).get(absolute)
        if field is not None:
            kustomization = next(name for name in KUSTOMIZATION_FILES
                                 if os.path.isfile(os.path.join(folder, name)))
            return f"{os.path.normpath(os.path.join(shown, kustomization))} lists it under " \
                f"{field}:"
        folder, shown = os.path.dirname(folder), os.path.join(shown, os.pardir)
    return ""


@lru_cache(maxsize=256)
def _patched_near(folder: str) -> bool:
    """Whether a kustomization in the folder or the two above lists any patch: asked once
    per folder, not once per file of it."""
    for _ in range(3):
        if _patches(folder):
            return True
        folder = os.path.dirname(folder)
    return False


@lru_cache(maxsize=256)
def _patches(folder: str) -> Mapping[str, str]:
    """The absolute paths of the patch files the folder's kustomization lists, by field."""
    for name in KUSTOMIZATION_FILES:
        path = os.path.join(folder, name)
        try:  # the bounded reader: a kustomization is as untrusted as the manifests
            documents = list(islice(read_text(read_regular(path), path), 1))
        except OSError:
            continue
        if not documents or documents[0].error:
            continue
        spec = documents[0].obj
        if not isinstance(spec, Mapping):
            return {}
        found: dict[str, str] = {}
        for field in ("patches", "patchesJson6902", "patchesStrategicMerge"):
            items = spec.get(field)
            for item in items if isinstance(items, list) else ():
                target = item.get("path") if isinstance(item, Mapping) else item
                # an inline patch (a string of YAML) names no file
                if isinstance(target, str) and "\n" not in target:
                    found[os.path.normpath(os.path.join(folder, target))] = field
        return found
    return {}


def fragment(obj: Any) -> str:
    """Why an object is a patch fragment rather than a whole object, or ''."""
    if _written_with_dollar(obj) and _has_directive(obj, 0):
        return "it has a strategic merge patch directive ($patch)"
    containers = [item for spec in _pod_specs(obj) for group in _CONTAINER_LISTS
                  if isinstance(spec.get(group), list) for item in spec[group]]
    if containers and not any(is_mapping(c) and c.get("image") for c in containers):
        return "no container has an image"
    return ""


def _pod_specs(obj: Any) -> list[Mapping[str, Any]]:
    """The pod specs of a Pod or a built-in controller (the shapes patches take)."""
    if not is_mapping(obj):
        return []
    spec = obj.get("spec")
    for step in (("jobTemplate", "spec", "template", "spec"), ("template", "spec"), ()):
        current: Any = spec
        for key in step:
            current = current.get(key) if is_mapping(current) else None
        if is_mapping(current) and any(g in current for g in _CONTAINER_LISTS):
            return [current]
    return []


def _written_with_dollar(obj: Any) -> bool:
    """Whether a string of the object, as JSON, starts with `$`, as a directive key does: no
    more than a hint, but orjson writes an object a hundred times faster than Python walks
    it, and almost no object has one."""
    try:
        return b'"$' in orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:  # too deep, or an integer past 64 bits: walk it
        return True


def _has_directive(value: Any, depth: int) -> bool:
    if depth > 64:
        return False
    if isinstance(value, Mapping):
        return any((isinstance(key, str) and key.startswith(_DIRECTIVES))
                   or _has_directive(item, depth + 1) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_directive(item, depth + 1) for item in value)
    return False
