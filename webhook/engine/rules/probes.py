"""Probes: a slow start needs a startup window, and liveness must not be trigger-happy.

Missing probe fields count with the API server's defaults (periodSeconds 10,
failureThreshold 3, initialDelaySeconds 0), which is how the object reaches the webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property
from typing import Any

from pydantic import Field

from webhook.engine.hidden import redacted_at
from webhook.engine.patch import add
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding, matches_any
from webhook.engine.workload import Container, Workload

HANDLERS = ("httpGet", "tcpSocket", "exec", "grpc")
_HANDLER_KEYS = frozenset(HANDLERS)
# The containers that run for the pod's life and so have probes: a KServe model spec and an
# OME runner are.
PROBED = frozenset({"containers", "model", "runner", "nodeTemplate"})
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_FAILURE_THRESHOLD = 3
INT32_MAX = 2**31 - 1  # probe fields are int32 in the Kubernetes API


def is_probed(container: Container) -> bool:
    """Whether the container runs for the pod's life and so has probes: a main container, a
    KServe model spec, a NodeTemplate's spec, or a native sidecar (an init container with
    `restartPolicy: Always`, which Kubernetes probes as it probes main containers)."""
    return container.group in PROBED or (container.group == "initContainers"
                                         and container.data.get("restartPolicy") == "Always")


class LivenessToleranceParams(Params):
    minSeconds: int = 60


class StartupProbeParams(Params):
    # The shortest window the injected probe allows: periodSeconds x failureThreshold.
    periodSeconds: int = Field(10, ge=1)
    failureThreshold: int = Field(60, ge=1)
    # Image glob -> the shortest window in seconds for containers of that image (large model
    # servers load for many minutes); the first glob that matches wins.
    imageWindows: dict[str, int] = Field(default_factory=dict)

    @cached_property
    def window_globs(self) -> dict[str, int]:
        """imageWindows with each `name:*` glob also as `name@*`: an image pinned by digest
        (`vllm/vllm-openai@sha256:...`, as disallow-latest-tag advises) is the same server
        as its tags and loads as long."""
        globs: dict[str, int] = {}
        for pattern, seconds in self.imageWindows.items():
            globs.setdefault(pattern, max(seconds, 1))
            if pattern.endswith(":*"):
                globs.setdefault(pattern[:-2] + "@*", max(seconds, 1))
        return globs

    @cached_property
    def _window_globs(self) -> tuple[str, ...]:
        return tuple(self.window_globs)

    def window(self, image: Any) -> int:
        """The shortest startup window, in seconds, for a container of this image: one
        match against all the globs at once, since most images are in none of them."""
        if isinstance(image, str) and matches_any(image, self._window_globs):
            for pattern, seconds in self.window_globs.items():
                if matches_any(image, (pattern,)):
                    return seconds
        return self.periodSeconds * self.failureThreshold


def _positive(probe: Mapping[str, Any], field: str, default: int) -> int:
    value = probe.get(field)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return default


def liveness_allowance(probe: Mapping[str, Any]) -> int:
    """Seconds a container gets before its liveness probe restarts it when it never answers:
    initialDelaySeconds + failureThreshold x periodSeconds."""
    delay = probe.get("initialDelaySeconds")
    if not isinstance(delay, int) or isinstance(delay, bool) or delay < 0:
        delay = 0
    return delay + (_positive(probe, "failureThreshold", DEFAULT_FAILURE_THRESHOLD)
                    * _positive(probe, "periodSeconds", DEFAULT_PERIOD_SECONDS))


def liveness_probe_tolerance(workload: Workload, params: LivenessToleranceParams) -> list[Finding]:
    """failureThreshold x periodSeconds of a liveness probe is at least minSeconds, so a GC
    pause or a network blip does not restart the pod."""
    findings = []
    for container in workload.containers:
        if not is_probed(container):
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


def inject_startup_probe(workload: Workload, params: StartupProbeParams) -> list[Finding]:
    """A container with a liveness probe and no startup probe gets one built from the liveness
    handler, so liveness checks only begin once the container has started.

    The startup window is never shorter than the time the liveness probe already allowed
    (its initialDelaySeconds and failure tolerance): a guardrail must not turn a slow but
    working start into a restart loop. The initial delay is not copied: the probe checks from
    the start and lets a fast start through at once.
    """
    findings = []
    for container in workload.containers:
        if not is_probed(container):
            continue
        liveness = container.probe("livenessProbe")
        if liveness is None or container.probe("startupProbe") is not None:
            continue
        handlers = _HANDLER_KEYS.intersection(liveness)
        if len(handlers) != 1:
            continue  # no valid probe to copy; the API server rejects it anyway
        [handler] = handlers
        period = params.periodSeconds
        allowed = liveness_allowance(liveness)
        shortest = -(-params.window(container.data.get("image")) // period)
        threshold = min(max(shortest, -(-allowed // period)), INT32_MAX)
        startup: dict[str, Any] = {handler: liveness[handler]}
        if "timeoutSeconds" in liveness:
            startup["timeoutSeconds"] = liveness["timeoutSeconds"]
        startup["periodSeconds"] = period
        startup["failureThreshold"] = threshold
        path = container.field_path("startupProbe")
        name = "health.startup" if workload.is_node_template else "startupProbe"
        liveness_name = "health.liveness" if workload.is_node_template else "livenessProbe"
        window = period * threshold
        why = f" (no less than {liveness_name} allowed)" if threshold > shortest else ""
        found = finding(
            container, f"add {name}: it runs the liveness check every {period}s for up to "
            f"{window}s{why} and holds off liveness checks until it succeeds, so a slow start "
            "is not restarted",
            path, (add(path, startup),))
        # A report shows the copied handler with its secret headers' values hidden
        # (Authorization: Bearer ...); the API server gets them as they are.
        get = startup.get("httpGet")
        shown = redacted_at(tuple(str(key) for key in path), startup) \
            if isinstance(get, Mapping) and get.get("httpHeaders") else startup
        if shown is not startup:
            found = replace(found, shown_patch=(add(path, shown),))
        findings.append(found)
    return findings
