"""evaluate(): one object, a policy set and a Review in, one Decision out. Pure: no I/O, no
globals.

The webhook (on the object the API server hands it), the CLI and users' scripts (on what
decode() makes of a manifest) all call this function, which is what makes the offline
verdict equal the one given at `kubectl apply`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from webhook.engine import policy_exceptions
from webhook.engine.apiserver import refusal, refused_fields
from webhook.engine.cel_errors import EvaluationError, TooCostly
from webhook.engine.claims import ClaimLookup, with_claims
from webhook.engine.decode import Decoded
from webhook.engine.globs import matches_any
from webhook.engine.hidden import hidden_values, hide
from webhook.engine.namespaces import excluded_requester, is_namespace, judge_opt_outs
from webhook.engine.normalize import Problem, checks
from webhook.engine.patch import PatchError, Path, apply_patch, dotted, value_at
from webhook.engine.policy import Policy, PolicySet
from webhook.engine.results import (
    Decision,
    Finding,
    Resource,
    Result,
    outcome_of,
    verdict_of,
)
from webhook.engine.review import Review
from webhook.engine.rules.cel_review import Request, Reviews
from webhook.engine.schema import is_mapping
from webhook.engine.trainjobs import TrainJobs, with_train_jobs
from webhook.engine.workload import (
    InvalidObject,
    RefusedObject,
    Workload,
    api_group,
    not_judged,
    read_workload,
)

MIRROR_POD_ANNOTATION = "kubernetes.io/config.mirror"


def evaluate(obj: Decoded | Any, policies: PolicySet, review: Review | None = None) -> Decision:
    """Judge one object for one review (webhook.engine.review; by default a CREATE now).

    `obj` is what decode() made of a manifest (then what the API server would refuse is
    refused here, with each field and why, and a failed finding about a field the API
    server refuses on its own says so), or an object taken as it is given: as the API
    server hands it to the webhook, which is how the webhook calls this, and how --fix
    computes the patch for a manifest as written. The decision's patch applies to that
    object.

    Mutate policies run first and validate policies judge the patched object, as the validating
    webhook does after the mutating one. On UPDATE, a violation the old object already had
    (same policy, container and field, with the same value there) is only a warning. In the
    config's dry-run mode nothing is denied or patched. A PolicyException object itself is
    checked as the webhook checks it. A Namespace is judged for its opt-outs alone, for the
    review's user and groups (webhook.engine.namespaces); a mirror pod is left alone only
    when a kubelet creates it (is_node).
    """
    review = review if review is not None else Review()
    offline = isinstance(obj, Decoded)  # decoded here, not by the API server
    refused: tuple[Problem, ...] = ()
    if isinstance(obj, Decoded):
        obj, refused = obj.object, obj.refusals
    old_object = review.old_object
    operation, username, groups = review.operation, review.username, review.groups
    resource = describe(obj, review.namespace, review.source)
    config = policies.config
    in_dry_run_mode = config.mode == "dry-run"
    if policy_exceptions.is_exception(obj):
        return policy_exceptions.judge(obj, policies, resource, review.now, in_dry_run_mode)
    if is_namespace(obj):  # judged for its opt-outs alone (webhook.engine.namespaces)
        opt_outs = judge_opt_outs(obj, old_object, operation, username, groups, config)
        if opt_outs.status == "skip":
            return Decision(resource, (opt_outs,), allowed=True, skipped=opt_outs.reason)
        return _decide(resource, (opt_outs,), in_dry_run_mode, (), None)
    try:
        if refused:
            raise RefusedObject(refused)
        # decode() checked a built-in kind against its schema as it decoded it; the API
        # server did, if it handed the object over.
        workload = read_workload(obj, config.nodeTemplateGroups,
                                 custom_kinds=config.workload_kinds,
                                 decoded=not offline, checked=offline and checks(obj))
    except RefusedObject as error:
        findings = tuple(Finding(problem if path == ("apiVersion",) else
                                 f"{dotted(path)}: {problem}", path)
                         for path, problem in error.problems)
        return error_decision(resource, str(error), f"{resource}: the Kubernetes API server "
                              f"would refuse it: {error}", in_dry_run_mode, findings)
    except InvalidObject as error:
        return error_decision(resource, str(error),
                              f"{resource}: cannot be judged: {error}", in_dry_run_mode)
    if workload is None:
        return skipped_decision(resource, policies, not_judged(obj, config.workload_kinds))
    excluded = _exclusion(workload, resource.namespace, username, groups, policies)
    if excluded:
        return skipped_decision(resource, policies, excluded)

    namespace = resource.namespace
    lookup = review.claims
    workload = with_train_jobs(with_claims(workload, lookup, namespace), review.train_jobs)
    # One activation per state of its object for all its CEL policies
    # (webhook.engine.rules.cel_review). Without CEL policies the CEL modules stay unloaded.
    shared = policies.cel
    reviews = Reviews(shared) if shared is not None else None
    request = Request(operation, namespace, username, groups, review.dry_run, old_object,
                      review.namespace_object, reviews)
    results: list[Result] = []  # in the order they run: mutate policies, then validate ones
    current: Any = obj
    patch: list[dict[str, Any]] = []
    unpatched = _not_mutated(workload, operation)
    if unpatched:
        # The chart sends neither to the mutating webhook: offline says the same.
        results = [_result(policy, "skip", reason=unpatched) for policy in policies.mutating]
    elif operation == "UPDATE" and _same_pod_template(workload, obj, old_object):
        # A patched pod template rolls out new pods: an update that leaves the template alone
        # (a label edit, a scale) is admitted unchanged, with a warning of what it lacks.
        results = [_mark_unpatched(_run(policy, workload, request))
                   for policy in policies.mutating]
    else:
        for policy in policies.mutating:
            result = _run(policy, workload, request)
            results.append(result)
            # A mutate policy's findings share its verdict: patch, or a patch it only
            # reports (audit, warn, dry-run).
            if not result.findings or \
                    verdict_of(result, result.findings[0], in_dry_run_mode) != "patch":
                continue
            ops = result.patch
            try:
                patched = apply_patch(current, ops)
                # A CEL policy's patch is the user's: the API server must accept its result.
                # A rule's patch adds only what is well typed to an object read already.
                patched_workload = (read_workload(patched, config.nodeTemplateGroups,
                                                  check=policy.cel is not None,
                                                  checked=policy.cel is None,
                                                  custom_kinds=config.workload_kinds)
                                    or workload)
                patched_workload = with_train_jobs(
                    with_claims(patched_workload, lookup, namespace), review.train_jobs)
            except (PatchError, InvalidObject) as error:
                results[-1] = _result(policy, "error", reason=f"patch failed: {error}")
                continue
            if policy.cel is not None:
                # A CEL mutation is the user's: its patch must leave nothing to patch.
                again = _run(policy, patched_workload, request)
                if again.status != "pass":
                    results[-1] = _result(policy, "error", reason=(
                        "CEL mutations are not idempotent: after the patch, a second pass "
                        f"would {again.status} again ({again.message})"))
                    continue
            # The policies still to run judge the patched object.
            current, workload = patched, patched_workload
            patch.extend(ops)

    validated = [_run(policy, workload, request) for policy in (
        policies.validating if workload.is_claim else policies.validating_pods)]
    if operation == "UPDATE" and old_object is not None:
        old_keys = _violation_keys(old_object, policies, request, lookup, review.train_jobs)
        if old_keys:
            validated = [_mark_preexisting(result, old_keys, workload.obj)
                         for result in validated]
    failed = any(result.status == "fail" for result in validated)
    if failed and review.exceptions:
        validated = policy_exceptions.apply(validated, review.exceptions, config, review.now,
                                            workload.kind, namespace, resource.name,
                                            workload.labels)
    if failed and offline:
        validated = _note_api_server_refusals(validated, workload)
    results += validated

    by_id = {result.policy: result for result in results}
    ordered = tuple(by_id.get(policy.id) or policy.idle for policy in policies.policies)
    decision = _decide(resource, ordered, in_dry_run_mode, tuple(patch),
                       current if patch else None)
    if workload.unseen:
        return replace(decision, warnings=(*decision.warnings, *workload.unseen))
    return decision


def describe(obj: Any, namespace: str | None = None, source: str = "") -> Resource:
    """Name an object for messages, whatever shape it has."""
    if not is_mapping(obj):
        return Resource("", "", namespace or "", "", source)
    metadata = obj.get("metadata")
    metadata = metadata if is_mapping(metadata) else {}
    name = metadata.get("name") or metadata.get("generateName") or ""
    own_namespace = metadata.get("namespace")
    return Resource(
        api_version=_text(obj.get("apiVersion")),
        kind=_text(obj.get("kind")),
        namespace=_text(own_namespace) or namespace or "",
        name=_text(name),
        source=source,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _run(policy: Policy, workload: Workload, request: Request) -> Result:
    if policy.action == "off":
        return policy.idle  # "the policy is off": the same value every time
    reason = _skip_reason(policy, workload, request.namespace, request.operation)
    if reason:
        return _result(policy, "skip", reason=reason)
    rule = policy.rule
    try:
        if rule is not None:
            findings = rule.check(workload, policy.params)
        elif policy.cel is not None:
            reason = policy.cel.unmatched(workload, request)
            if reason:
                return _result(policy, "skip", reason=reason)
            findings = policy.cel.check(workload, request)
        else:
            findings = []
    except TooCostly as error:  # quotes nothing of the object: no need to search it
        return _result(policy, "error", reason=f"CEL {error}")
    except EvaluationError as error:  # a CEL expression that fails on this object
        # A function's error can quote what the expression read: never an env value.
        values = hidden_values(workload.obj, request.old_object, request.namespace_object)
        return _result(policy, "error", reason=hide(f"CEL {error}", values))
    except Exception as error:  # a rule bug must not take the webhook down with it
        name = rule.name if rule is not None else "cel"
        return _result(policy, "error", reason=f"rule {name} failed ({type(error).__name__})")
    if not findings:
        return policy.passed
    if policy.message:
        findings = [replace(f, message=f"{f.message} ({policy.message})") for f in findings]
    status = "patch" if policy.type == "mutate" else "fail"
    return _result(policy, status, tuple(findings))


def _skip_reason(policy: Policy, workload: Workload, namespace: str, operation: str) -> str:
    """Why the policy does not judge this object, or '' when it does (a CEL policy's
    matchConditions are asked after this)."""
    if policy.action == "off":
        return "the policy is off"
    if not policy.node_templates and workload.is_node_template:
        return "not applicable to NodeTemplate"
    if workload.is_claim and not policy.claims:
        return f"not applicable to {workload.kind}"
    if workload.is_config_map and not policy.config_maps:
        return "not applicable to ConfigMap"
    if policy.everywhere:
        return "" if operation in policy.match.operations else _UNMATCHED
    if not policy.applies(workload.kind, namespace, operation, workload.labels):
        return _UNMATCHED
    return ""


_UNMATCHED = "the policy does not match this object"


def _note_api_server_refusals(results: list[Result], workload: Workload) -> list[Result]:
    """Failed results about fields the API server refuses on its own say so in their reason:
    such an object (or, for another project's kind, every pod made from it) is judged
    offline only, never by the webhook."""
    refused = refused_fields(workload)
    if not refused:
        return results
    group = api_group(str(workload.obj.get("apiVersion")))
    noted = []
    for result in results:
        hits = [refused[f.at] for f in result.findings if f.at in refused] \
            if result.status == "fail" else []
        noted.append(replace(result, reason=refusal(workload.kind, group, any(hits)))
                     if hits else result)
    return noted


def _not_mutated(workload: Workload, operation: str) -> str:
    """Why mutate policies leave the object alone, or '' when they run. A Pod is patched on
    CREATE only. A ReplicaSet its Deployment controls is patched through the Deployment: a
    patch on the ReplicaSet alone would make the Deployment controller, which compares its
    own template with the ReplicaSet's, create another ReplicaSet for ever."""
    if workload.is_pod and operation != "CREATE":
        return "a Pod is mutated on CREATE only"
    if workload.is_config_map:
        return "a ConfigMap is judged, never mutated"
    if workload.unpatched:
        return workload.unpatched
    if workload.kind == "ReplicaSet" and api_group(str(workload.obj.get("apiVersion"))) == "apps":
        owner = _controller_owner(workload.obj)
        if owner == ("apps", "Deployment"):
            return "a ReplicaSet its Deployment controls is patched through the Deployment"
    return ""


def _controller_owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(API group, kind) of the object's controlling owner, if it names one."""
    metadata = obj.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            return api_group(str(owner.get("apiVersion"))), str(owner.get("kind"))
    return None


def _same_pod_template(workload: Workload, obj: Any, old_object: Any) -> bool:
    """Whether a pod controller's update leaves its pod templates (spec.template, a CronJob's
    spec.jobTemplate.spec.template, every replica spec's of a PyTorchJob...) as the old object
    had them."""
    if workload.is_pod or workload.is_node_template or not workload.pod_specs \
            or not isinstance(old_object, Mapping):
        return False
    return all(value_at(obj, pod.template_path) is not None
               and value_at(obj, pod.template_path) == value_at(old_object, pod.template_path)
               for pod in workload.pod_specs)


def _mark_unpatched(result: Result) -> Result:
    """The findings of a mutate result that this update does not patch."""
    if result.status != "patch":
        return result
    return replace(result, findings=tuple(replace(f, preexisting=True)
                                          for f in result.findings))


# A finding as an UPDATE compares it with the old object's: policy, container, field, which
# of the policy's checks (Finding.check), and a digest of the field's value.
FindingKey = tuple[str | None, str | None, Path, str, bytes]


def _mark_preexisting(result: Result, old_keys: frozenset[FindingKey], obj: Any) -> Result:
    """On UPDATE, the findings of a failed result the old object already had: the same
    policy, container, field and check with the same value there, so a second secret added
    beside one already there, a second validation of a CEL policy failing on the same field,
    or a new value of the same field (`kubectl set image` to another :latest image, a new
    literal password) is new."""
    if result.status != "fail":
        return result
    return replace(result, findings=tuple(
        replace(f, preexisting=True) if _finding_key(result.policy, f, obj) in old_keys else f
        for f in result.findings))


def _finding_key(policy: str | None, found: Finding, obj: Any) -> FindingKey:
    """Which finding this is, whatever the order of arrays: an index into an array of named
    entries (containers, env, ports, volumeMounts...) is replaced by the entry's name, so
    `env[2].value` of DB_PASSWORD stays the same finding when a variable is added before it.
    The field's value is kept as a digest (see _value_digest), never as itself."""
    field: list[str | int] = []
    node = obj
    for segment in found.at:
        if isinstance(node, list) and isinstance(segment, int) and segment < len(node):
            node = node[segment]
            name = node.get("name") if isinstance(node, Mapping) else None
            field.append(f"name={name}" if isinstance(name, str) else segment)
            continue
        field.append(segment)
        node = node.get(str(segment)) if isinstance(node, Mapping) else None
    return policy, found.container, tuple(field), found.check, _value_digest(found, node)


def _value_digest(found: Finding, value: Any) -> bytes:
    """What the offending value was, as a digest: equal values give equal digests, and the
    key holds nothing of a secret. A finding that names no field of its own (a CEL
    validation without a fieldPath points at the whole container or object: `check` says
    which validation failed) has no offending value to compare, so its digest is empty."""
    if found.check:
        return b""
    if isinstance(value, str):  # most offending values (an image, an env value)
        data = b"s" + value.encode("utf-8", "surrogatepass")
    else:  # a missing field (None), a number, a list or mapping: its canonical JSON
        data = b"j" + _CANONICAL.encode(value).encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).digest()


# One encoder for every digest: json.dumps() with options builds a new one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def _result(policy: Policy, status: Any, findings: tuple[Finding, ...] = (),
            reason: str = "") -> Result:
    return Result(policy.id, policy.type, policy.action, status, findings, reason)


def _violation_keys(old_object: Any, policies: PolicySet, request: Request,
                    lookup: ClaimLookup, train_jobs: TrainJobs) -> frozenset[FindingKey]:
    """The key (see _finding_key) of every validate violation the old object already had."""
    try:
        workload = read_workload(old_object, policies.config.nodeTemplateGroups, check=False,
                                 custom_kinds=policies.config.workload_kinds)
    except InvalidObject:
        return frozenset()
    if workload is None:
        return frozenset()
    workload = with_train_jobs(with_claims(workload, lookup, request.namespace), train_jobs)
    old_request = request._replace(old_object=None)
    keys = set()
    for policy in policies.validating:
        for found in _run(policy, workload, old_request).findings:
            keys.add(_finding_key(policy.id, found, workload.obj))
    return frozenset(keys)


def _exclusion(workload: Workload, namespace: str, username: str | None,
               groups: tuple[str, ...], policies: PolicySet) -> str:
    """Why the object is left alone, or '' when it is judged."""
    config = policies.config
    if namespace and matches_any(namespace, config.excludeNamespaces):
        return f"namespace {namespace} is excluded"
    requester = excluded_requester(username, groups, config)
    if requester:
        return requester
    if workload.is_pod and is_node(username, groups):
        metadata = workload.obj.get("metadata") or {}
        annotations = metadata.get("annotations")
        if is_mapping(annotations) and MIRROR_POD_ANNOTATION in annotations:
            return "a mirror pod of a static pod is managed by the kubelet"
    return ""


def is_node(username: str | None, groups: tuple[str, ...]) -> bool:
    """Whether the requester is a kubelet, as Kubernetes' own node identifier (NodeRestriction,
    the Node authorizer) tells one: a `system:node:<name>` user in the `system:nodes` group.
    Only a kubelet makes mirror pods; anyone else's pod with the mirror annotation is judged."""
    return bool(username and username.startswith("system:node:")) and "system:nodes" in groups


def skipped_decision(resource: Resource, policies: PolicySet, reason: str) -> Decision:
    """The verdict on an object not judged at all: every policy skips, for `reason`."""
    results = tuple(_result(policy, "skip", reason=reason) for policy in policies.policies)
    return Decision(resource, results, allowed=True, outcome="allowed", skipped=reason)


def error_decision(resource: Resource, problem: str, message: str, dry_run: bool,
                   findings: tuple[Finding, ...] = ()) -> Decision:
    """The verdict on an object that cannot be judged (unreadable, the wrong shape, refused by
    the API server): one `error` result, with a finding per field when they are known; denied
    with `message`, or in dry-run admitted with it as a warning."""
    result = Result(None, "validate", "enforce", "error", findings, problem)
    if dry_run:
        return Decision(resource, (result,), allowed=True, outcome="error",
                        warnings=(f"[dry-run] {message}",), dry_run=True)
    return Decision(resource, (result,), allowed=False, outcome="error", message=message)


_QUIET = frozenset({"pass", "skip"})  # results that add nothing to the verdict


def _decide(resource: Resource, results: tuple[Result, ...], dry_run: bool,
            patch: tuple[dict[str, Any], ...], patched: Any) -> Decision:
    """Render each finding's verdict (results.verdict_of) into the answer: denials, warnings,
    audit annotations and the patch."""
    notable = [result for result in results if result.status not in _QUIET]
    if not notable:  # every policy passed or skipped: nothing to say
        return Decision(resource, results, allowed=True, outcome="allowed", dry_run=dry_run)
    denials: list[str] = []
    denial_reason = ""
    warnings: list[str] = []
    audit: dict[str, list[str]] = {}
    verdicts: set[str] = set()
    for result in notable:
        if result.status == "error":
            verdicts.add("error")
            line = f"[{result.policy}] {result.reason}"
            (warnings if dry_run else denials).append(line)
            continue
        if result.status not in ("fail", "patch"):
            continue
        # A mutate policy that is not enforced (or not in force: dry-run) only says what it
        # would have patched.
        would_patch = "would patch: " if result.status == "patch" else ""
        for found in result.findings:
            said = verdict_of(result, found, dry_run)
            verdicts.add(said)
            if said == "excepted":  # never denies, never silent
                warnings.append(f"[{result.policy}] {found.message} (excepted by "
                                f"{found.exception})")
                audit.setdefault(f"excepted.{result.policy}", []).append(
                    f"{found.exception}: {found.message}")
            elif said == "audit":
                audit.setdefault(str(result.policy), []).append(would_patch + found.message)
            elif said == "warn" and result.action == "warn":
                warnings.append(f"[{result.policy}] {would_patch}{found.message}")
            elif said == "warn":
                warnings.append(f"[{result.policy}] {found.message} "
                                "(already violated before this update)")
            elif found.preexisting and result.status == "patch":
                warnings.append(f"[{result.policy}] {found.message} (not patched: this "
                                "update leaves the pod template unchanged)")
            elif said in ("would-patch", "would-deny"):
                would = said.replace("-", " ")
                warnings.append(f"[{result.policy}] {would}: {found.message}")
                audit.setdefault(str(result.policy), []).append(f"{would}: {found.message}")
            elif said == "deny":
                field = f" (field: {found.path})" if found.at else ""
                denials.append(f"[{result.policy}] {found.message}{field}")
                denial_reason = denial_reason or found.denial_reason or "Forbidden"
    message = ""
    if denials:
        message = f"{resource} is denied by quickq-guard:\n" + "\n".join(f"- {d}" for d in denials)
    return Decision(
        resource=resource,
        results=results,
        allowed=not denials,
        outcome=outcome_of(verdicts, bool(patch)),
        message=message,
        warnings=tuple(warnings),
        audit_annotations={key: "; ".join(values) for key, values in audit.items()},
        patch=patch,
        patched=patched,
        denial_reason=denial_reason or "Forbidden",
        dry_run=dry_run,
    )
