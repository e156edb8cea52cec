"""The kinds `check --strict` accepts without judging them: those Kubernetes itself serves
(by API group), besides the kinds quickq-guard judges or knows it does not.

A hand-kept list of the built-in API (Kubernetes 1.3x): a kind missing here only makes
`--strict` refuse it, never changes a verdict.
"""

from __future__ import annotations

BUILT_IN: dict[str, frozenset[str]] = {group: frozenset(kinds.split()) for group, kinds in {
    "": "Pod Service ConfigMap Secret Namespace ServiceAccount PersistentVolume "
        "PersistentVolumeClaim Endpoints LimitRange ResourceQuota ReplicationController "
        "PodTemplate Node Event Binding List",
    "apps": "Deployment StatefulSet DaemonSet ReplicaSet ControllerRevision",
    "batch": "Job CronJob",
    "autoscaling": "HorizontalPodAutoscaler Scale",
    "policy": "PodDisruptionBudget Eviction",
    "networking.k8s.io": "Ingress IngressClass NetworkPolicy IPAddress ServiceCIDR",
    "rbac.authorization.k8s.io": "Role RoleBinding ClusterRole ClusterRoleBinding",
    "storage.k8s.io": "StorageClass CSIDriver CSINode CSIStorageCapacity VolumeAttachment "
                      "VolumeAttributesClass",
    "scheduling.k8s.io": "PriorityClass",
    "coordination.k8s.io": "Lease LeaseCandidate",
    "node.k8s.io": "RuntimeClass",
    "discovery.k8s.io": "EndpointSlice",
    "events.k8s.io": "Event",
    "certificates.k8s.io": "CertificateSigningRequest ClusterTrustBundle",
    "admissionregistration.k8s.io": "ValidatingWebhookConfiguration "
                                    "MutatingWebhookConfiguration ValidatingAdmissionPolicy "
                                    "ValidatingAdmissionPolicyBinding MutatingAdmissionPolicy "
                                    "MutatingAdmissionPolicyBinding",
    "apiextensions.k8s.io": "CustomResourceDefinition",
    "apiregistration.k8s.io": "APIService",
    "flowcontrol.apiserver.k8s.io": "FlowSchema PriorityLevelConfiguration",
    "resource.k8s.io": "ResourceClaim ResourceClaimTemplate DeviceClass ResourceSlice "
                       "DeviceTaintRule",
    "kustomize.config.k8s.io": "Kustomization Component",
    "quickq.io": "PolicyException NodeTemplate",
    "quickq": "NodeTemplate",
}.items()}


def known_kind(group: str, kind: str) -> bool:
    """Whether `check --strict` lets an object of this kind pass unjudged (or judges it)."""
    from webhook.engine.workload import NOT_JUDGED, WORKLOAD_KINDS

    return kind in BUILT_IN.get(group, ()) or (group, kind) in WORKLOAD_KINDS \
        or (group, kind) in NOT_JUDGED
