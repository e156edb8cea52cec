"""Labels: cost reports, dashboards and selectors all start from them."""

from __future__ import annotations

from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.workload import Workload, dotted


class RequireLabelsParams(Params):
    labels: tuple[str, ...] = ("app",)


def require_labels(workload: Workload, params: RequireLabelsParams) -> list[Finding]:
    """metadata.labels carries every configured key."""
    return [finding(None, f"add the label {dotted(('metadata', 'labels', key))}",
                    ("metadata", "labels", key))
            for key in params.labels if key not in workload.labels]
