"""Pods for the Pod Security Standards profiles: each control violated alone, at the pod and
at the container level, in init and ephemeral containers, and compliant neighbours of each.

tests/test_pod_security.py judges them offline against the controls the Standards name;
tests/cluster/test_pod_security_admission.py runs the same Pods through the Kubernetes Pod
Security Admission controller and asserts that it names the same controls.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

IMAGE = "registry.example.com/app:1.2.3"
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
# Which quickq-guard policy each reason of a PSA denial names, by the profile it was judged at.
PSA_REASONS = {
    "hostProcess": "pss-host-process",
    "host namespaces": "pss-host-namespaces",
    "privileged": "pss-privileged",
    "non-default capabilities": "pss-capabilities-baseline",
    "hostPath volumes": "pss-host-path-volumes",
    "hostPort": "pss-host-ports",
    "forbidden AppArmor profile": "pss-apparmor",
    "forbidden AppArmor profiles": "pss-apparmor",
    "seLinuxOptions": "pss-selinux",
    "procMount": "pss-proc-mount",
    "forbidden sysctls": "pss-sysctls",
    "restricted volume types": "pss-volume-types",
    "allowPrivilegeEscalation != false": "pss-privilege-escalation",
    "runAsNonRoot != true": "pss-run-as-non-root",
    "runAsUser=0": "pss-run-as-user",
    "unrestricted capabilities": "pss-capabilities-restricted",
}
SECCOMP = {"baseline": "pss-seccomp-baseline", "restricted": "pss-seccomp-restricted"}


def policy_for(reason: str, level: str) -> str:
    """The policy id of one reason in a PSA message (`seccompProfile` is either level's)."""
    return SECCOMP[level] if reason == "seccompProfile" else PSA_REASONS[reason]


def container(name: str = "app", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": copy.deepcopy(RESOURCES), **fields}


def restricted_container(name: str = "app", **security: Any) -> dict[str, Any]:
    """A container the restricted profile accepts once its pod sets runAsNonRoot and a
    seccomp profile; `security` changes its securityContext (None removes a key)."""
    context: dict[str, Any] = {"allowPrivilegeEscalation": False,
                               "capabilities": {"drop": ["ALL"]}}
    for key, value in security.items():
        if value is None:
            context.pop(key, None)
        else:
            context[key] = value
    return container(name, securityContext=context)


RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class Case:
    """A Pod spec judged at a profile, and the controls that fail on it."""

    name: str
    level: str  # baseline | restricted
    spec: dict[str, Any]
    expect: frozenset[str] = frozenset()
    annotations: dict[str, str] = field(default_factory=dict)
    # Added by an UPDATE of the pods/ephemeralcontainers subresource: the API server refuses
    # ephemeral containers in a create.
    ephemeral: tuple[dict[str, Any], ...] = ()

    def pod(self, namespace: str, name: str | None = None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name or self.name, "namespace": namespace,
                                    "labels": {"app": "pss"}}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": copy.deepcopy(self.spec)}

    def with_ephemeral(self, obj: dict[str, Any]) -> dict[str, Any]:
        updated = copy.deepcopy(obj)
        updated["spec"]["ephemeralContainers"] = [copy.deepcopy(c) for c in self.ephemeral]
        return updated


def baseline(name: str, expect: set[str] | None = None, *, containers: list[Any] | None = None,
             annotations: dict[str, str] | None = None, ephemeral: tuple[Any, ...] = (),
             **spec: Any) -> Case:
    body = {"containers": containers or [container()], **spec}
    return Case(name, "baseline", body, frozenset(expect or ()), annotations or {}, ephemeral)


def restricted(name: str, expect: set[str] | None = None, *,
               containers: list[Any] | None = None, pod_security: dict[str, Any] | None = None,
               ephemeral: tuple[Any, ...] = (), **spec: Any) -> Case:
    context = dict(RESTRICTED_POD) if pod_security is None else pod_security
    body = {"securityContext": context, "containers": containers or [restricted_container()],
            **spec}
    return Case(name, "restricted", body, frozenset(expect or ()), {}, ephemeral)


def with_security(**context: Any) -> dict[str, Any]:
    return container(securityContext=context)


BASELINE_CASES = [
    baseline("b-compliant"),
    baseline("b-restricted-only-violations", securityContext={"runAsUser": 0},
             volumes=[{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/"}}]),
    baseline("b-host-network", {"pss-host-namespaces"}, hostNetwork=True),
    baseline("b-host-pid", {"pss-host-namespaces"}, hostPID=True),
    baseline("b-host-ipc", {"pss-host-namespaces"}, hostIPC=True),
    baseline("b-host-namespaces-false", hostNetwork=False, hostPID=False, hostIPC=False),
    baseline("b-host-process-pod", {"pss-host-process", "pss-host-namespaces"},
             hostNetwork=True,
             securityContext={"windowsOptions": {"hostProcess": True}}),
    baseline("b-host-process-container", {"pss-host-process", "pss-host-namespaces"},
             hostNetwork=True,
             containers=[with_security(windowsOptions={"hostProcess": True})]),
    baseline("b-privileged", {"pss-privileged"}, containers=[with_security(privileged=True)]),
    baseline("b-privileged-init", {"pss-privileged"},
             initContainers=[container("init", securityContext={"privileged": True})]),
    baseline("b-privileged-false", containers=[with_security(privileged=False)]),
    baseline("b-capabilities", {"pss-capabilities-baseline"},
             containers=[with_security(capabilities={"add": ["SYS_ADMIN"]})]),
    baseline("b-capabilities-init", {"pss-capabilities-baseline"},
             initContainers=[container("init", securityContext={
                 "capabilities": {"add": ["NET_RAW"]}})]),
    baseline("b-capabilities-default-set", containers=[with_security(capabilities={
        "add": ["CHOWN", "NET_BIND_SERVICE", "SYS_CHROOT"], "drop": ["NET_RAW"]})]),
    baseline("b-host-path", {"pss-host-path-volumes"},
             volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
    baseline("b-other-volumes", volumes=[
        {"name": "share", "nfs": {"server": "nfs.example.com", "path": "/"}},
        {"name": "scratch", "emptyDir": {}}]),
    baseline("b-host-port", {"pss-host-ports"},
             containers=[container(ports=[{"containerPort": 8080, "hostPort": 8080}])]),
    baseline("b-host-port-init", {"pss-host-ports"},
             initContainers=[container("init", ports=[{"containerPort": 53,
                                                       "hostPort": 53}])]),
    baseline("b-container-port", containers=[container(ports=[{"containerPort": 8080}])]),
    baseline("b-apparmor-unconfined", {"pss-apparmor"},
             annotations={"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}),
    baseline("b-apparmor-allowed", annotations={
        "container.apparmor.security.beta.kubernetes.io/app": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/init": "localhost/audited"},
        initContainers=[container("init")]),
    baseline("b-selinux-pod-type", {"pss-selinux"},
             securityContext={"seLinuxOptions": {"type": "spc_t"}}),
    baseline("b-selinux-container-user", {"pss-selinux"},
             containers=[with_security(seLinuxOptions={"user": "system_u"})]),
    baseline("b-selinux-init-role", {"pss-selinux"},
             initContainers=[container("init", securityContext={
                 "seLinuxOptions": {"role": "sysadm_r"}})]),
    baseline("b-selinux-allowed", securityContext={"seLinuxOptions": {
        "type": "container_init_t", "level": "s0:c123,c456"}},
        containers=[with_security(seLinuxOptions={"type": "container_kvm_t"})]),
    baseline("b-proc-mount", {"pss-proc-mount"},
             containers=[with_security(procMount="Unmasked")],
             hostUsers=False),  # the API server refuses Unmasked outside a user namespace
    baseline("b-seccomp-pod-unconfined", {"pss-seccomp-baseline"},
             securityContext={"seccompProfile": {"type": "Unconfined"}}),
    baseline("b-seccomp-container-unconfined", {"pss-seccomp-baseline"},
             containers=[with_security(seccompProfile={"type": "Unconfined"})]),
    baseline("b-seccomp-allowed", securityContext={"seccompProfile": {"type": "RuntimeDefault"}},
             containers=[with_security(seccompProfile={"type": "Localhost",
                                                       "localhostProfile": "audit.json"})]),
    baseline("b-sysctls", {"pss-sysctls"},
             securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}),
    baseline("b-sysctls-safe", securityContext={"sysctls": [
        {"name": "net.ipv4.ip_local_reserved_ports", "value": "30000-30100"},
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "80"}]}),
    # The Pods of the ephemeral cases are created for real first, so they also pass the
    # default policies (runAsNonRoot) should the quickq-guard webhook be registered.
    baseline("b-ephemeral-privileged", {"pss-privileged"}, securityContext={"runAsNonRoot": True},
             ephemeral=({"name": "debug", "image": IMAGE,
                         "securityContext": {"privileged": True}},)),
    baseline("b-ephemeral-plain", securityContext={"runAsNonRoot": True},
             ephemeral=({"name": "debug", "image": IMAGE},)),
]

RESTRICTED_CASES = [
    restricted("r-compliant"),
    restricted("r-compliant-container-level", pod_security={},
               containers=[restricted_container(runAsNonRoot=True,
                                                seccompProfile={"type": "Localhost",
                                                                "localhostProfile": "a.json"},
                                                runAsUser=1000)]),
    restricted("r-baseline-control", {"pss-host-namespaces"}, hostPID=True),
    restricted("r-privilege-escalation-unset", {"pss-privilege-escalation"},
               containers=[restricted_container(allowPrivilegeEscalation=None)]),
    restricted("r-privilege-escalation-init", {"pss-privilege-escalation"},
               initContainers=[restricted_container("init", allowPrivilegeEscalation=True)]),
    restricted("r-run-as-non-root-pod-false", {"pss-run-as-non-root"},
               pod_security={**RESTRICTED_POD, "runAsNonRoot": False},
               containers=[restricted_container(runAsNonRoot=True)]),
    restricted("r-run-as-non-root-container-false", {"pss-run-as-non-root"},
               containers=[restricted_container(runAsNonRoot=False)]),
    restricted("r-run-as-non-root-unset", {"pss-run-as-non-root"},
               pod_security={"seccompProfile": {"type": "RuntimeDefault"}},
               containers=[restricted_container("a", runAsNonRoot=True),
                           restricted_container("b")]),
    restricted("r-run-as-user-pod", {"pss-run-as-user"},
               pod_security={**RESTRICTED_POD, "runAsUser": 0}),
    restricted("r-run-as-user-container", {"pss-run-as-user"},
               containers=[restricted_container(runAsUser=0)]),
    restricted("r-seccomp-unset", {"pss-seccomp-restricted"},
               pod_security={"runAsNonRoot": True},
               containers=[restricted_container("a", seccompProfile={"type": "RuntimeDefault"}),
                           restricted_container("b")]),
    restricted("r-seccomp-pod-unconfined", {"pss-seccomp-restricted"},
               pod_security={"runAsNonRoot": True, "seccompProfile": {"type": "Unconfined"}},
               containers=[restricted_container(seccompProfile={"type": "RuntimeDefault"})]),
    restricted("r-seccomp-container-unconfined", {"pss-seccomp-restricted"},
               containers=[restricted_container(seccompProfile={"type": "Unconfined"})]),
    restricted("r-capabilities-no-drop", {"pss-capabilities-restricted"},
               containers=[restricted_container(capabilities={"drop": ["NET_RAW"]})]),
    restricted("r-capabilities-add", {"pss-capabilities-restricted"},
               containers=[restricted_container(capabilities={"drop": ["ALL"],
                                                              "add": ["CHOWN"]})]),
    restricted("r-capabilities-net-bind", containers=[restricted_container(
        capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})]),
    restricted("r-host-path", {"pss-volume-types"},
               volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
    restricted("r-nfs", {"pss-volume-types"},
               volumes=[{"name": "share", "nfs": {"server": "nfs.example.com", "path": "/"}}]),
    restricted("r-allowed-volumes", volumes=[
        {"name": "a", "configMap": {"name": "c"}}, {"name": "b", "secret": {"secretName": "s"}},
        {"name": "c", "emptyDir": {}}, {"name": "d", "persistentVolumeClaim": {"claimName": "p"}},
        {"name": "e", "downwardAPI": {"items": []}}, {"name": "f", "projected": {"sources": []}},
        {"name": "g", "csi": {"driver": "csi.example.com"}},
        {"name": "h", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}}}}]),
    restricted("r-windows", pod_security={"runAsNonRoot": True}, os={"name": "windows"},
               containers=[container()]),
    restricted("r-ephemeral-plain", {"pss-privilege-escalation", "pss-capabilities-restricted"},
               ephemeral=({"name": "debug", "image": IMAGE},)),
    restricted("r-ephemeral-compliant", ephemeral=({
        "name": "debug", "image": IMAGE,
        "securityContext": {"allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]}}},)),
]

CASES = BASELINE_CASES + RESTRICTED_CASES
