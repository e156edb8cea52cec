"""One full pass over the cluster: every kind audited, listed in pages, each object judged as
it comes and let go. `audit --once` renders the verdicts; the controller keeps their results.

The DRA claims are listed first, so that a pod's claims resolve against them as `check`
resolves them against the claims among its input.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from lightkube import AsyncClient

from webhook.audit import cluster, scan
from webhook.audit.cluster import Kind
from webhook.cli.judge import Judged
from webhook.engine.claims import CLAIM_KINDS, NO_CLAIMS, ClaimLookup, claims_from
from webhook.engine.policy import PolicySet
from webhook.engine.policy_exceptions import NONE, Exceptions
from webhook.engine.review import Review
from webhook.server import exception_view
from webhook.server.claim_view import WHERE, spec_only
from webhook.server.cluster_view import Snapshot


@dataclass(slots=True)
class Pass:
    """What a pass found besides the verdicts: each kind's list resourceVersion, to watch
    from, and how many objects it judged."""

    versions: dict[Kind, str]
    judged: int = 0
    claims: ClaimLookup = NO_CLAIMS  # the claims listed, which pods resolved theirs against
    # What of each claim the lookup reads (claim_view.spec_only), by claim_key
    claim_objects: dict[tuple[str, str, str], Any] = field(default_factory=dict)


async def judge_all(api: AsyncClient, policies: PolicySet, kinds: Sequence[Kind],
                    review: Review, skipped: Collection[str], found: Pass,
                    namespaces: Sequence[str] = ()) -> AsyncIterator[tuple[Kind, Judged]]:
    """Each object of `kinds` in a namespace the webhook judges (only `namespaces`, when
    named), with its verdict. `review` is the pass's (exceptions, time); claims are added
    once the claim kinds are listed."""
    resolved = False
    config = policies.config
    for of in kinds:
        if namespaces and not of.namespaced:
            continue
        if not resolved and of.kind not in CLAIM_KINDS:
            found.claims = claims_from(found.claim_objects.values(), WHERE)
            review = replace(review, claims=found.claims)
            resolved = True
        for namespace in namespaces or (None,):
            listing = cluster.Listing(api, of, namespace)
            async for obj in listing.objects():
                where = (obj.get("metadata") or {}).get("namespace") or ""
                if not cluster.judged_namespace(where, config, skipped):
                    continue
                if not resolved:
                    found.claim_objects[claim_key(obj)] = claim_view(obj)
                found.judged += 1
                yield of, scan.judged(obj, of.plural, policies, review)
            found.versions[of] = listing.version


def claim_key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    metadata = obj.get("metadata") or {}
    return (str(obj.get("kind")), str(metadata.get("namespace")), str(metadata.get("name")))


def claim_view(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a claim's lookup reads of a claim object (its spec, not its status)."""
    return {**spec_only(dict(obj)), "apiVersion": obj.get("apiVersion"), "kind": obj.get("kind")}


EXCEPTIONS = cluster.kind(exception_view.KIND.group, exception_view.KIND.version,
                          exception_view.KIND.kind, exception_view.KIND.plural)


@dataclass(frozen=True, slots=True)
class InForce:
    """The PolicyExceptions read, as the engine takes them; each exception namespace's list
    resourceVersion (to watch from); and the soonest time one expires, when the results it
    covers change."""

    exceptions: Exceptions = NONE
    versions: Mapping[str, str] = field(default_factory=dict)
    expires: datetime | None = None


async def exceptions(api: AsyncClient, policies: PolicySet) -> InForce:
    """The PolicyExceptions the webhook honours (from the config's exceptionNamespaces), read
    as serve --watch-exceptions reads them: none when the kind is not installed."""
    objects: dict[tuple[str, str], Any] = {}
    versions: dict[str, str] = {}
    for namespace in policies.config.exceptionNamespaces:
        listing = cluster.Listing(api, EXCEPTIONS, namespace)
        async for obj in listing.objects():
            metadata = obj.get("metadata") or {}
            objects[(str(metadata.get("namespace") or namespace), str(metadata.get("name")))] = obj
        if not listing.version:  # not served: the CRD is not installed
            return InForce()
        versions[namespace] = listing.version
    read = exception_view.read(Snapshot(MappingProxyType(objects)), policies) \
        if objects else NONE
    now = datetime.now(UTC)
    coming = [moment for moment in map(_expiry, objects.values())
              if moment is not None and moment > now]  # an expired one changes nothing more
    return InForce(read, versions, min(coming, default=None))


def _expiry(obj: Mapping[str, Any]) -> datetime | None:
    expires = (obj.get("spec") or {}).get("expires")
    try:
        moment = datetime.fromisoformat(str(expires))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
