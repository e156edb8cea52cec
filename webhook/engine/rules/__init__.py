"""The rule registry: each policy names one of these rules and gives it parameters.

A rule is a plain function `(workload, params) -> list[Finding]`, found in the module of its
family under the name of its default policy id (`disallow-root-user` is
`security.disallow_root_user`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from webhook.engine.results import Finding
from webhook.engine.rules import (
    gpu,
    images,
    labels,
    probes,
    resources,
    secrets,
    security,
)
from webhook.engine.rules._base import NoParams, Params
from webhook.engine.workload import Workload

RuleType = Literal["validate", "mutate"]


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    type: RuleType
    check: Callable[[Workload, Any], list[Finding]]
    params: builtins.type[Params]
    node_templates: bool = True  # False: the rule is about pods only
    claims: bool = False  # True: the rule judges ResourceClaims and ResourceClaimTemplates
    pods: bool = True  # False: it judges nothing else (no Pod, controller or NodeTemplate)
    config_maps: bool = False  # True: the rule judges ConfigMaps too


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule("require-requests", "validate", resources.require_requests,
             resources.RequireRequestsParams),
        Rule("valid-resource-quantities", "validate", resources.valid_resource_quantities,
             NoParams),
        Rule("disallow-latest-tag", "validate", images.disallow_latest_tag,
             images.LatestTagParams),
        Rule("disallow-root-user", "validate", security.disallow_root_user, NoParams),
        Rule("require-gpu-limits", "validate", gpu.require_gpu_limits, gpu.GpuParams),
        Rule("gpu-priority-class", "validate", gpu.gpu_priority_class, gpu.GpuParams,
             node_templates=False),
        Rule("no-plaintext-secrets", "validate", secrets.no_plaintext_secrets,
             secrets.PlaintextSecretParams, config_maps=True),
        Rule("liveness-probe-tolerance", "validate", probes.liveness_probe_tolerance,
             probes.LivenessToleranceParams),
        Rule("require-labels", "validate", labels.require_labels,
             labels.RequireLabelsParams),
        Rule("inject-startup-probe", "mutate", probes.inject_startup_probe,
             probes.StartupProbeParams),
        Rule("inject-gpu-toleration", "mutate", gpu.inject_gpu_toleration,
             gpu.GpuTolerationParams),
        Rule("gpu-resource-claims", "validate", gpu.gpu_resource_claims,
             gpu.ResourceClaimParams, node_templates=False, claims=True, pods=False),
        Rule("gpu-claim-usage", "validate", gpu.gpu_claim_usage, gpu.GpuParams,
             node_templates=False),
        Rule("require-kueue-queue", "validate", gpu.require_kueue_queue,
             gpu.KueueQueueParams, node_templates=False),
    )
}
