"""Non-root processes: a container escape from root is a node compromise."""

from __future__ import annotations

from typing import Any

from webhook.engine.results import Finding
from webhook.engine.rules._base import NoParams, finding
from webhook.engine.workload import Workload, dotted

_RUN_AS_USER = ("securityContext", "runAsUser")


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def disallow_root_user(workload: Workload, params: NoParams) -> list[Finding]:
    """Every container runs as a non-root user.

    The effective runAsUser and runAsNonRoot are the container's when set, else the pod's:
    root is uid 0, or an unset uid without runAsNonRoot: true (the image's USER decides).
    """
    findings = []
    for pod_spec in workload.pod_specs:
        pod = pod_spec.security_context
        pod_user = _int_or_none(pod.get("runAsUser"))
        for container in pod_spec.containers:
            own = container.security_context
            own_user = _int_or_none(own.get("runAsUser"))
            user = own_user if own_user is not None else pod_user
            if user is not None and user != 0:  # most containers: a non-root uid
                continue
            non_root = own.get("runAsNonRoot")
            if non_root is None:
                non_root = pod.get("runAsNonRoot")
            if user == 0:
                where = (container.field_path("securityContext", "runAsUser") if own_user == 0
                         else pod_spec.field_path("securityContext", "runAsUser"))
                # With runAsNonRoot: true the kubelet refuses to start it (CreateContainerConfig
                # Error): still denied, since it can never run, and the message says why.
                refused = (" with runAsNonRoot: true, which the kubelet refuses to start"
                           if non_root is True else "")
                # A composed kind names the uid its own way (a NIMService's spec.userID).
                field = ("securityContext.runAsUser" if where[-2:] == _RUN_AS_USER
                         else dotted(where))
                findings.append(finding(
                    container, f"runs as root (runAsUser: 0){refused}; set {field} to a "
                    "non-zero uid", where))
            elif "securityContext" in container.elsewhere:
                continue  # its operator sets it (webhook.engine.workload.composed)
            elif user is None and non_root is not True:
                findings.append(finding(
                    container, "may run as root; set securityContext.runAsNonRoot: true "
                    "or a non-zero securityContext.runAsUser",
                    container.field_path("securityContext", "runAsNonRoot")))
    return findings
