"""The accelerators the GPU policies know: one setting (`accelerators` in the global config)
that require-gpu-limits, gpu-priority-class and inject-gpu-toleration all read.

An accelerator reaches a pod in one of two ways: an extended resource a device plugin
publishes (`nvidia.com/gpu`, `google.com/tpu`), or a Dynamic Resource Allocation claim whose
device class hands out GPUs (`gpu.nvidia.com`). The defaults are the names the vendors
publish:

- NVIDIA: `nvidia.com/gpu`; `nvidia.com/gpu.shared` (time-slicing or MPS replicas with
  renameByDefault); `nvidia.com/mig-<profile>` (MIG, `mixed` strategy), also `.shared`.
- AMD: `amd.com/gpu`; `amd.com/<compute>_<memory>` partitions such as `amd.com/cpx_nps4`
  (`resource_naming_strategy: mixed`); `amd.com/gpu_vf` and `amd.com/gpu_pf` (passthrough).
- Intel: `gpu.intel.com/i915` and `gpu.intel.com/xe`. Not `*_monitoring` (access to every
  GPU of a node for a monitoring agent) nor the fractional `millicores`/`memory.max`/`tiles`
  of Intel's GPU Aware Scheduling, which are not device counts.
- Google: `google.com/tpu`, on nodes GKE taints `google.com/tpu=present:NoSchedule`.
- DRA: the DeviceClasses NVIDIA's DRA driver installs, `gpu.nvidia.com`, `mig.nvidia.com`,
  `vfio.gpu.nvidia.com` and the `compute-domain-*.nvidia.com` ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

DEFAULT_RESOURCES = (
    "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*",
    "amd.com/gpu", "amd.com/gpu_vf", "amd.com/gpu_pf", "amd.com/*px_nps*",
    "gpu.intel.com/i915", "gpu.intel.com/xe",
    "google.com/tpu",
)
# Resource glob -> the taint key the nodes that offer it carry; the first glob that matches
# wins, and a resource no glob names is tolerated under its own name (the key Kubernetes'
# ExtendedResourceToleration admission plugin uses).
DEFAULT_TAINT_KEYS: Mapping[str, str] = {
    "nvidia.com/*": "nvidia.com/gpu",
    "amd.com/*": "amd.com/gpu",
    "gpu.intel.com/i915": "gpu.intel.com/i915",
    "gpu.intel.com/xe": "gpu.intel.com/xe",
    "google.com/tpu": "google.com/tpu",
}
DEFAULT_GPU_DEVICE_CLASSES = (
    "gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com", "compute-domain-*.nvidia.com",
)
# GPU device class glob -> the taint key of the nodes whose devices it hands out: NVIDIA's
# GPU nodes carry nvidia.com/gpu whichever way their GPUs are handed out. A class no glob
# names gets no toleration (no convention names its nodes' taint).
DEFAULT_DEVICE_CLASS_TAINT_KEYS: Mapping[str, str] = {"*.nvidia.com": "nvidia.com/gpu"}


class Accelerators(BaseModel):
    """Which extended resources and DRA device classes are accelerators, and the taint key
    of the nodes that offer each resource."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resources: tuple[str, ...] = DEFAULT_RESOURCES
    taintKeys: Mapping[str, str] = DEFAULT_TAINT_KEYS
    gpuDeviceClasses: tuple[str, ...] = DEFAULT_GPU_DEVICE_CLASSES
    deviceClassTaintKeys: Mapping[str, str] = DEFAULT_DEVICE_CLASS_TAINT_KEYS
