"""The GPU policies' parameters (webhook.engine.rules.gpu holds the rules).

A module of their own: the rules are compiled by mypyc in the image (setup.py), and a pydantic
model with methods cannot be in a compiled module.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property

from pydantic import Field

from webhook.engine.accelerators import Accelerators
from webhook.engine.rules._base import Params

__all__ = ["GpuParams", "GpuTolerationParams", "KueueQueueParams", "ResourceClaimParams"]


class GpuParams(Params):
    # The global config's setting (the loader hands it in); a policy may name its own list.
    accelerators: Accelerators = Accelerators()
    gpuResources: tuple[str, ...] | None = None

    @cached_property
    def resources(self) -> tuple[str, ...]:
        """The GPU resource globs this policy judges by."""
        return self.gpuResources if self.gpuResources is not None \
            else self.accelerators.resources

    @cached_property
    def device_classes(self) -> tuple[str, ...]:
        return self.accelerators.gpuDeviceClasses


class GpuTolerationParams(GpuParams):
    # GPU resource glob -> the taint key GPU nodes of that vendor carry, before the
    # accelerators' own (see taint_key).
    taintKeys: Mapping[str, str] = Field(default_factory=dict)
    effect: str = "NoSchedule"

    @cached_property
    def taint_keys(self) -> Mapping[str, str]:
        """This policy's taint keys, then the accelerators'; the first glob that matches wins."""
        return {**self.taintKeys, **{pattern: key for pattern, key
                                     in self.accelerators.taintKeys.items()
                                     if pattern not in self.taintKeys}}


class ResourceClaimParams(GpuParams):
    # Namespace glob -> the device class globs claims there may name; the first glob that
    # matches the namespace wins, and a namespace no glob names may name any class.
    allowedDeviceClasses: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)
    # `allocationMode: All` takes every matching GPU of a node; `adminAccess` reaches devices
    # other pods hold.
    allowAllocationModeAll: bool = False
    allowAdminAccess: bool = False
    # The most GPUs one request may ask for; None: no cap.
    maxCount: int | None = Field(None, ge=1)


class KueueQueueParams(GpuParams):
    # Namespace globs whose GPU workloads must be queued (the policy is off until its action
    # is set).
    namespaces: tuple[str, ...] = ("*",)
    label: str = "kueue.x-k8s.io/queue-name"
