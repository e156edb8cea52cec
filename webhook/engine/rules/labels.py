"""Labels: cost reports, dashboards and selectors all start from them.

They are required where the pods get them: a Pod's and a NodeTemplate's metadata.labels, a
controller's pod template (spec.template.metadata.labels), an ML component's own `labels`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import field_validator

from webhook.engine.patch import Path, value_at
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.schema import is_mapping
from webhook.engine.workload import Workload, dotted

_OBJECT_LABELS: Path = ("metadata", "labels")
_EMPTY: Mapping[str, Any] = {}

# A Kubernetes label key: an optional DNS subdomain prefix and '/', then a name of up to 63
# characters, alphanumeric at both ends, with '-', '_' and '.' between.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_SHAPE = ("each item of labels is a label key or a list of alternative keys, e.g. "
          "[[app, app.kubernetes.io/name], team]")


class RequireLabelsParams(Params):
    # Every item must be present; an item that is a list is satisfied by any one of its keys.
    labels: tuple[tuple[str, ...], ...] = (("app", "app.kubernetes.io/name"),)

    @field_validator("labels", mode="before")
    @classmethod
    def _alternatives(cls, value: Any) -> Any:
        """`app` stands for [app]; anything else than a key or a list of keys is refused with
        the shape it should have."""
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list; {_SHAPE}")
        items = []
        for number, item in enumerate(value, 1):
            keys = [item] if isinstance(item, str) else item
            if not isinstance(keys, list | tuple) or not keys:
                raise ValueError(f"item {number} is {_shown(item)}; {_SHAPE}")
            for key in keys:
                if not isinstance(key, str):
                    raise ValueError(f"item {number} holds {_shown(key)}; {_SHAPE}")
                if not _is_label_key(key):
                    raise ValueError(f"item {number}: {key!r} is not a Kubernetes label key")
            items.append(tuple(keys))
        return tuple(items)


def _is_label_key(key: str) -> bool:
    prefix = key.rpartition("/")[0]
    return len(prefix) <= 253 and _LABEL_KEY.fullmatch(key) is not None


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "an empty list" if not value else "a list of lists"
    names = {dict: "a mapping", bool: "a boolean", int: "a number", float: "a number",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)


def require_labels(workload: Workload, params: RequireLabelsParams) -> list[Finding]:
    """The pods' labels carry every configured key, or one key of each list of
    alternatives."""
    findings: list[Finding] = []
    for pod_spec in workload.pod_specs:
        path = pod_spec.labels_path
        if not path:
            continue  # the pods' labels are not in the object (webhook.engine.workload.composed)
        labels = pod_spec.labels if pod_spec.labels is not None \
            else workload.labels if path == _OBJECT_LABELS else _pod_labels(workload, path)
        for keys in params.labels:
            for key in keys:
                if key in labels:
                    break
            else:
                missing = _missing(path, keys)
                if missing not in findings:  # pod specs that share their labels
                    findings.append(missing)
    return findings


@lru_cache(maxsize=1024)
def _missing(path: Path, keys: tuple[str, ...]) -> Finding:
    """The (immutable) finding for labels missing at `path`: the same paths and keys recur
    from object to object, so each is worded once."""
    fields = " or ".join(dotted((*path, key)) for key in keys)
    where = "" if path == _OBJECT_LABELS else " (the pods' labels)"
    return finding(None, f"add the label {fields}{where}", (*path, keys[0]))


def _pod_labels(workload: Workload, path: Path) -> Mapping[str, Any]:
    """The labels at a pod spec's labels_path. A component's own `labels` (a KServe predictor)
    come on top of the object's, which KServe copies onto the component's pods."""
    found = _dig(workload.obj, path)
    if path[-2:] != _OBJECT_LABELS:
        return {**workload.labels, **found}
    return found


def _dig(obj: Mapping[str, Any], path: Path) -> Mapping[str, Any]:
    """The mapping at `path`, or an empty one where a level is missing or not a mapping (an
    object the API server refuses for that before any policy runs)."""
    found = value_at(obj, path)
    return found if is_mapping(found) else _EMPTY
