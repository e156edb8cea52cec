"""Labels: cost reports, dashboards and selectors all start from them.

They are required where the pods get them: a Pod's and a NodeTemplate's metadata.labels, a
controller's pod template (spec.template.metadata.labels), an ML component's own `labels`.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from webhook.engine.patch import Path, value_at
from webhook.engine.results import Finding
from webhook.engine.rules._base import finding
from webhook.engine.rules.labels_params import RequireLabelsParams
from webhook.engine.schema import is_mapping
from webhook.engine.workload import Workload, dotted

_OBJECT_LABELS: Path = ("metadata", "labels")
_EMPTY: Mapping[str, Any] = {}


def require_labels(workload: Workload, params: RequireLabelsParams) -> list[Finding]:
    """The pods' labels carry every configured key, or one key of each list of
    alternatives."""
    findings: list[Finding] = []
    for pod_spec in workload.pod_specs:
        path = pod_spec.labels_path
        labels = workload.labels if path == _OBJECT_LABELS else _pod_labels(workload, path)
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
