"""What the audit reads from the API server, through lightkube: the kinds the webhook judges
that the cluster serves, their objects in pages, and the namespaces it must leave alone.

Every read is a paged list (`limit` and `continue`) or a watch: never one request per
object. Items of a list carry no apiVersion or kind of their own; each gets its kind's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightkube import ALL_NS, AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError

from webhook.api_resources import resource
from webhook.engine.claims import CLAIM_KINDS, DRA_GROUP
from webhook.engine.globs import matches_any
from webhook.engine.namespaces import IGNORE_LABEL
from webhook.engine.policy import Config, PolicySet
from webhook.engine.workload import BUILT_IN, WORKLOAD_KINDS, api_group
from webhook.server.cluster_view import Kind as ServedKind

log = logging.getLogger("quickq_guard.audit")

PAGE = 500  # objects per list request
# A ConfigMap can hold up to 1 MiB: a page of them is kept small so a page stays small.
SMALL_PAGE = 50
CRDS = resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition",
                "customresourcedefinitions", namespaced=False)
NAMESPACES = resource("", "v1", "Namespace", "namespaces", namespaced=False)


@dataclass(frozen=True, slots=True)
class Kind(ServedKind):
    """A kind the audit lists and watches, at the version the cluster serves: the webhook's
    record of a served kind, with its scope, its page size and its lightkube class."""

    namespaced: bool = True
    page: int = PAGE
    resource: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def kind(group: str, version: str, name: str, plural: str, namespaced: bool = True) -> Kind:
    """A kind to list and watch (webhook.api_resources makes its lightkube class once)."""
    page = SMALL_PAGE if (group, name) == ("", "ConfigMap") else PAGE
    return Kind(group, version, name, plural, namespaced, page,
                resource(group, version, name, plural, namespaced))


def client(kubeconfig: str | None) -> AsyncClient:
    """A client from the kubeconfig file, else the pod's service account (then KUBECONFIG);
    no proxy from the environment: the audit talks to its API server only."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(config=config, trust_env=False)


def built_in_kinds(policies: PolicySet) -> list[Kind]:
    """The Kubernetes kinds the webhook judges: the claims first (a pod's claims resolve
    against them), then the pod controllers and pods; ConfigMaps when a policy reads them."""
    kinds = [kind(DRA_GROUP, "v1", name, name.lower() + "s") for name in sorted(CLAIM_KINDS)
             if any(p.claims and p.action != "off" for p in policies.policies)]
    kinds += [kind(api_group(built.api_version), built.api_version.rpartition("/")[2], name,
                   built.resource) for name, built in BUILT_IN.items()]
    if any(p.config_maps and p.action != "off" for p in policies.policies):
        kinds.append(kind("", "v1", "ConfigMap", "configmaps"))
    return kinds


def judged_custom_kind(group: str, name: str, config: Config) -> bool:
    """Whether the webhook judges objects of another project's kind (or quickq's own)."""
    if name == "NodeTemplate":
        return group in config.nodeTemplateGroups
    if (group, name) in config.workload_kinds:
        return True
    return (group, name) in WORKLOAD_KINDS and (group, name) not in _BUILT_IN_KEYS


_BUILT_IN_KEYS = frozenset({(api_group(b.api_version), name) for name, b in BUILT_IN.items()}
                           | {(DRA_GROUP, name) for name in CLAIM_KINDS})


async def served_kinds(api: AsyncClient, policies: PolicySet) -> tuple[list[Kind], str]:
    """Every kind to audit that this cluster serves: the built-in ones, and those of the
    CustomResourceDefinitions installed that the webhook judges, at their storage version;
    and the resourceVersion of the CRDs' list, to watch them from."""
    kinds = built_in_kinds(policies)
    config = policies.config
    listing = api.list(CRDS, chunk_size=PAGE)
    async for crd in listing:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        group, name = str(spec.get("group", "")), str(names.get("kind", ""))
        if not judged_custom_kind(group, name, config):
            continue
        versions = [v for v in spec.get("versions") or () if v.get("served")]
        if not versions:
            continue
        stored = next((v for v in versions if v.get("storage")), versions[0])
        kinds.append(kind(group, str(stored["name"]), name, str(names.get("plural", "")),
                          spec.get("scope") != "Cluster"))
    return kinds, listing.resourceVersion or ""


class Listing:
    """The objects of one kind, in pages; `version` is the list's resourceVersion once read
    (a watch from it misses nothing)."""

    def __init__(self, api: AsyncClient, of: Kind, namespace: str | None = None) -> None:
        self.kind = of
        self.version = ""
        self._listing = api.list(of.resource, namespace=namespace or (
            ALL_NS if of.namespaced else None), chunk_size=of.page)

    async def objects(self) -> AsyncIterator[dict[str, Any]]:
        try:
            async for item in self._listing:
                yield plain(item, self.kind)
        except ApiError as error:
            code = error.status.code
            if code in (404, 405):  # not served (an older cluster): nothing
                log.warning("kind not served; not audited", extra={"fields": {
                    "event": "kind-not-served", "kind": self.kind.kind,
                    "apiVersion": self.kind.api_version}})
                return
            if code == 403:  # a kind the chart's webhook leaves off, so its RBAC too
                log.warning("kind not readable with this ServiceAccount; not audited",
                            extra={"fields": {"event": "kind-not-permitted",
                                              "kind": self.kind.kind,
                                              "apiVersion": self.kind.api_version}})
                return
            raise
        self.version = self._listing.resourceVersion or ""


def plain(item: Mapping[str, Any], of: Kind) -> dict[str, Any]:
    """A listed or watched item as the object `kubectl get -o json` prints."""
    obj = dict(item)
    metadata = obj.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):  # a model, from a client
        obj["metadata"] = metadata.to_dict()
    obj.setdefault("apiVersion", of.api_version)
    obj.setdefault("kind", of.kind)
    return obj


def judged_namespace(namespace: str, config: Config, skipped: Collection[str]) -> bool:
    """Whether the webhook judges objects of this namespace ("" for cluster scope): not one
    the config excludes (the chart puts its system namespaces and its own there), nor one
    labelled quickq.io/ignore=true."""
    if not namespace:
        return True
    return namespace not in skipped and not matches_any(namespace, config.excludeNamespaces)


@dataclass(frozen=True, slots=True)
class Namespaces:
    """The namespaces the webhook never judges though the config does not name them: those
    labelled quickq.io/ignore=true, and those being deleted (their objects go with them)."""

    ignored: frozenset[str] = frozenset()
    terminating: frozenset[str] = frozenset()

    @property
    def skipped(self) -> frozenset[str]:
        return self.ignored | self.terminating

    def seen(self, event: str, namespace: Mapping[str, Any]) -> Namespaces:
        """These namespaces after a watch event about one."""
        metadata = namespace.get("metadata") or {}
        name = str(metadata.get("name"))
        ignored, terminating = set(self.ignored), set(self.terminating)
        ignored.discard(name)
        terminating.discard(name)
        if event == "DELETED":
            pass  # gone: its name may come back as a new namespace
        elif metadata.get("deletionTimestamp"):
            terminating.add(name)
        elif (metadata.get("labels") or {}).get(IGNORE_LABEL) == "true":
            ignored.add(name)
        return Namespaces(frozenset(ignored), frozenset(terminating))


async def namespaces(api: AsyncClient) -> tuple[Namespaces, str]:
    """The namespaces to leave alone, and the list's resourceVersion (to watch from)."""
    listing = api.list(NAMESPACES, chunk_size=PAGE)
    found = Namespaces()
    async for item in listing:
        found = found.seen("ADDED", item)
    return found, listing.resourceVersion or ""
