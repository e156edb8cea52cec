"""Review: everything beside the object that a verdict depends on, in one immutable value.

The second of the engine's two steps is `evaluate(obj, policies, review)`. What an
AdmissionReview carries beside the object (the operation, the old object, the user, the
namespace, dry-run), and what the caller holds (the PolicyExceptions in force, where DRA
claims are looked up, the time) travel together here, each field meaning one thing whatever
the others hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from webhook.engine.claims import NO_CLAIMS, ClaimLookup
from webhook.engine.decode import Decoded
from webhook.engine.policy_exceptions import NONE, Exceptions
from webhook.engine.trainjobs import NO_TRAIN_JOBS, TrainJobs


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Review:
    """The request an object is judged for, as the API server would send it to the webhook.

    `operation` is CREATE, UPDATE, DELETE or CONNECT. On UPDATE, `old_object` is the object
    as stored (as the API server hands it over: offline, pass `decode(old)`), and a
    violation it already had is only a warning. `username` and `groups` are the requesting
    user's (the config may exclude some); `namespace` is the request's, for an object that
    names none, and `namespace_object` the Namespace itself (CEL's `namespaceObject`).
    `dry_run` is the request's dryRun (CEL's `request.dryRun`: nothing will be stored), not
    the config's dry-run mode. `exceptions` (webhook.engine.policy_exceptions.index) turn
    the validate findings they cover into warnings as of `now`, which is also when a
    PolicyException object's expiry is checked; it is the time of construction unless
    given. `claims` is where the Dynamic Resource Allocation claims a pod consumes are
    looked up (webhook.engine.claims: the claims of the same input offline, the webhook's
    view of the cluster online). `train_jobs` are the TrainJobs a Kubeflow Trainer runtime
    is judged with (webhook.engine.trainjobs: the TrainJobs of the same input offline; at
    admission, none exists yet). `source` names where the object was read from
    (file:document) in the decision.
    """

    operation: str = "CREATE"
    old_object: Any = None
    username: str | None = None
    groups: tuple[str, ...] = ()
    namespace: str | None = None
    namespace_object: Any = None
    dry_run: bool = False
    exceptions: Exceptions = NONE
    claims: ClaimLookup = NO_CLAIMS
    train_jobs: TrainJobs = NO_TRAIN_JOBS
    now: datetime = field(default_factory=_now)
    source: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.old_object, Decoded):  # decode(old): the object it decoded to
            object.__setattr__(self, "old_object", self.old_object.object)
        if not isinstance(self.groups, tuple):
            object.__setattr__(self, "groups", tuple(self.groups))
