"""Probes: slow model servers need a startup window, and liveness must not be trigger-happy.

Missing probe fields count with the API server's defaults (periodSeconds 10,
failureThreshold 3), which is how the object reaches the webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.engine.patch import add
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding
from webhook.engine.workload import Workload

HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
_HANDLER_KEYS = frozenset(HANDLERS)
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_FAILURE_THRESHOLD = 3


def _positive(probe: Mapping[str, Any], field: str, default: int) -> int:
    value = probe.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


class LivenessToleranceParams(Params):
    minSeconds: int = 60


def liveness_probe_tolerance(workload: Workload, params: LivenessToleranceParams) -> list[Finding]:
    """failureThreshold x periodSeconds of a liveness probe is at least minSeconds, so a GC
    pause or a network blip does not restart the pod."""
    findings = []
    for container in workload.containers:
        if container.group not in ("containers", "nodeTemplate"):
            continue
        probe = container.probe("livenessProbe")
        if probe is None:
            continue
        period = _positive(probe, "periodSeconds", DEFAULT_PERIOD_SECONDS)
        threshold = _positive(probe, "failureThreshold", DEFAULT_FAILURE_THRESHOLD)
        if period * threshold >= params.minSeconds:
            continue
        needed = -(-params.minSeconds // period)
        name = "health.liveness" if workload.is_node_template else "livenessProbe"
        findings.append(finding(
            container,
            f"{name} restarts after {period * threshold}s of failures (failureThreshold "
            f"{threshold} x periodSeconds {period}); raise {name}.failureThreshold to "
            f"{needed} or more (>= {params.minSeconds}s)",
            container.field_path("livenessProbe", "failureThreshold")))
    return findings


class StartupProbeParams(Params):
    periodSeconds: int = 10
    failureThreshold: int = 60


def inject_startup_probe(workload: Workload, params: StartupProbeParams) -> list[Finding]:
    """A container with a liveness probe and no startup probe gets one built from the liveness
    handler: the liveness probe only starts once the model has loaded."""
    findings = []
    for container in workload.containers:
        if container.group not in ("containers", "nodeTemplate"):
            continue
        liveness = container.probe("livenessProbe")
        if liveness is None or container.probe("startupProbe") is not None:
            continue
        handlers = _HANDLER_KEYS.intersection(liveness)
        if len(handlers) != 1:
            continue  # no valid probe to copy; the API server rejects it anyway
        [handler] = handlers
        startup: dict[str, Any] = {handler: liveness[handler]}
        if "timeoutSeconds" in liveness:
            startup["timeoutSeconds"] = liveness["timeoutSeconds"]
        startup["periodSeconds"] = params.periodSeconds
        startup["failureThreshold"] = params.failureThreshold
        path = container.field_path("startupProbe")
        name = "health.startup" if workload.is_node_template else "startupProbe"
        window = params.periodSeconds * params.failureThreshold
        findings.append(finding(
            container, f"add {name} (the liveness check, allowing {window}s to start) so a slow "
            "model load is not killed by the liveness probe", path, (add(path, startup),)))
    return findings
