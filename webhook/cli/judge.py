"""Reading and judging manifests in order, in pieces, so output streams and memory stays flat.

The inputs become tasks of about TASK_BYTES (a large file is split at `---` lines). Each task is
read, judged and rendered by the output format in one go, in this process or in a forked
worker, and the parent writes the rendered tasks in input order as they come back, keeping only
a few in flight. The output is byte for byte the one a single process writes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from webhook.cli import kustomize
from webhook.cli.exits import hint
from webhook.engine.claims import Claims, claims_from
from webhook.engine.decode import decode
from webhook.engine.evaluate import error_decision, evaluate, skipped_decision
from webhook.engine.patch import PatchError, apply_patch, rebase
from webhook.engine.policy import PolicySet
from webhook.engine.policy_exceptions import KIND
from webhook.engine.results import Decision, Resource, Result
from webhook.engine.review import Review
from webhook.engine.trainjobs import TrainJobs, train_jobs_from
from webhook.engine.workload import UNKNOWN_KIND
from webhook.manifests import (
    Document,
    Source,
    manifest_sources,
    read_regular,
    read_source,
    read_source_bytes,
    split,
)

if TYPE_CHECKING:
    from multiprocessing.context import ForkContext

TASK_BYTES = 512 * 1024  # input bytes per task: the unit of work and of output in flight
TASK_FILES = 100
# What the scan keeps of the bytes it read, for whoever judges them (a forked worker inherits
# them): past this, a file is read again when it is judged, so memory stays bounded.
KEPT_BYTES = 256 * 1024 * 1024
PARALLEL_MIN_BYTES = 1024 * 1024  # below this, starting workers costs more than it saves


@dataclass(frozen=True, slots=True)
class Judged:
    """One document and the verdict on it."""

    document: Document
    decision: Decision


# What a format makes of a task's verdicts, in whichever process judged them.
Render = Callable[[Sequence[Judged]], Any]


@dataclass(slots=True)
class Part:
    """A task's output: what the format rendered, counts for the summary, stderr lines."""

    rendered: Any
    counts: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    # The files a directory walk skipped, each with why (shown with --verbose), and how many
    # of them are kustomizations (without --verbose, said once for all).
    notes: list[str] = field(default_factory=list)
    kustomizations: int = 0


def judge(document: Document, policies: PolicySet, review: Review | None = None,
          strict: bool = False) -> Decision:
    """The verdict on one document, decoded as `kubectl apply` would hand it to the webhook
    (defaulted, normalized), for the run's `review` (its exceptions, the DRA claims of the
    input, its time; by default a CREATE now). Its patch applies to that object
    (manifest_patch makes the one for the manifest). `strict` (check --strict): a kind that
    is neither judged nor one Kubernetes serves is an error, not a skip."""
    if document.error:
        resource = Resource("", "", "", "", document.source)
        return error_decision(resource, document.error,
                              f"{document.source}: {document.error}", dry_run=False)
    review = replace(review, source=document.source) if review is not None \
        else Review(source=document.source)
    decision = evaluate(decode(document.obj), policies, review)
    if decision.skipped and UNKNOWN_KIND in decision.skipped:
        # `Deploymnet`: a typo of a judged kind, which the API server would refuse; skipped,
        # it would pass CI unjudged
        return error_decision(decision.resource, decision.skipped,
                              f"{document.source}: {decision.skipped}", dry_run=False)
    if strict and decision.skipped and (unknown := unknown_kind(document.obj, policies)):
        return error_decision(decision.resource, unknown, f"{document.source}: {unknown}",
                              dry_run=False)
    if decision.outcome in _REFUSED and (why := kustomize.fragment(document.obj)):
        # a patch fragment nobody applies alone: incomplete, not denied
        return skipped_decision(decision.resource, policies, (
            f"incomplete: {why}, as in a kustomize patch; check the output of kustomize "
            "build instead"))
    return decision


_REFUSED = frozenset({"denied", "error", "would-deny"})


def unknown_kind(obj: Any, policies: PolicySet) -> str:
    """Why `check --strict` refuses an object it does not judge: its kind is none that
    Kubernetes serves (webhook.kinds.BUILT_IN), quickq-guard knows, or the config's
    customKinds name; "" when it is one of those (a Service: skipped, as without --strict)."""
    from webhook.kinds import known_kind

    kind, api_version = str(obj.get("kind")), str(obj.get("apiVersion"))
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    if known_kind(group, kind) or (group, kind) in policies.config.workload_kinds:
        return ""
    return (f"kind {kind} ({group or 'core'}) is not a kind Kubernetes serves or quickq-guard "
            "knows (--strict)")


def manifest_patch(obj: Any, decision: Decision, policies: PolicySet,
                   review: Review | None = None) -> list[dict[str, Any]]:
    """The patch `decision` (on `obj` as applied) makes, for the manifest `obj` itself: what
    the policies that patch add, computed against the object as written (evaluated as given,
    without decode(), for a `review` whose old object is as written too), so that none of
    the API server's defaults (a copied probe's `scheme`, a Pod's default tolerations) is
    ever written into the manifest. A policy that patches only the defaulted object (it
    reads a default) gets its operations rebased on the manifest
    (webhook.engine.patch.rebase)."""
    if not decision.patch:
        return []
    patching = [result for result in decision.results if _patches(decision, result)]
    written = evaluate(obj, policies, review)
    by_policy = {result.policy: result for result in written.results}
    if all(by_policy.get(result.policy, result).status == "patch" for result in patching) \
            and len(patching) == sum(_patches(written, r) for r in written.results):
        return list(written.patch)
    operations: list[dict[str, Any]] = []
    current = obj
    for result in patching:
        same = by_policy.get(result.policy)
        ops = same.patch if same is not None and same.status == "patch" else rebase(
            result.patch, current)
        try:
            current = apply_patch(current, ops)
        except PatchError:
            continue
        operations += ops
    return operations


def _patches(decision: Decision, result: Result) -> bool:
    return any(decision.verdict(result, found) == "patch" for found in result.findings)


def input_claims(work: Sequence[Sequence[Source]], read: Mapping[str, bytes] | None) -> Claims:
    """The ResourceClaims and ResourceClaimTemplates anywhere in the input, so a pod resolves
    the claims it consumes whatever file or order they come in. Only the sources whose bytes
    name the kind are parsed: most inputs have none, and pay one scan of their bytes.
    `read`: the bytes read already, by source name (`-` is stdin, and only there)."""
    return claims_from(_input_objects(work, read, _CLAIM_MARKER))


def input_train_jobs(work: Sequence[Sequence[Source]],
                     read: Mapping[str, bytes] | None) -> TrainJobs:
    """The TrainJobs anywhere in the input, so a Kubeflow Trainer runtime is judged with
    those that run it whatever file or order they come in (as input_claims)."""
    return train_jobs_from(_input_objects(work, read, _TRAIN_JOB_MARKER))


def _input_objects(work: Sequence[Sequence[Source]], read: Mapping[str, bytes] | None,
                   marker: bytes) -> list[Any]:
    """The objects of the sources whose bytes hold `marker`."""
    read = read or {}
    objects: list[Any] = []
    for task in work:
        for source in task:
            if not source.exists:
                continue
            try:
                data = read.get(source.name)
                if data is None and source.name != "-":
                    data = _source_bytes(source)
            except OSError:
                continue  # reported when the source is judged
            if data is None or marker not in data:
                continue
            if source.name != "-":
                source = Source(source.name, walked=source.walked, line=source.line)
            objects += [document.obj for document in read_source(source, data)
                        if not document.error]
    return objects


# Only a source whose bytes name the kind can hold a claim, so only those are parsed before
# judging: parsing every file for claims made `check` of the 5,000-file corpus 1.9x the wall
# time, 1.6x the CPU (cli_bench's corpus, 2026-12-07). The same for PolicyExceptions below.
_CLAIM_MARKER = b"ResourceClaim"
_TRAIN_JOB_MARKER = b"TrainJob"


def _source_bytes(source: Source) -> bytes:
    return read_source_bytes(source)


def count(decision: Decision, counts: Counter[str]) -> None:
    """Add a decision to the summary counts (see webhook.cli.summary)."""
    counts["resources"] += 1
    if decision.skipped:  # not judged at all: neither allowed by the policies nor denied
        counts["skipped"] += 1
        # One skip result for the object, as the reports write it, not one per policy: a
        # repository of many objects not judged would read as thousands of policy skips.
        counts["skip"] += 1
        return
    counts["outcome:" + decision.outcome] += 1
    # A warning of no policy says what quickq-guard could not judge (a podSpecPatch, a KubeAI
    # Model's resource profile): shown, but nothing the object's author can fix, so it fails
    # no run, not even under --fail-on warn.
    if any(warning.startswith("[") for warning in decision.warnings):
        counts["level:warn"] += 1
    counts["skip"] += len(decision.unjudged)  # as the reports write them (reported_results)
    if decision.audit_annotations:
        counts["level:audit"] += 1
    for result in decision.results:
        said = standing(decision, result)
        if said == "warn" and all(v == "audit" for v in decision.verdicts(result)):
            said = "audit"  # counted apart: an audit policy's findings warn no one
        counts[said] += 1
        if result.status in ("fail", "patch"):
            counts["findings"] += len(result.findings)


def standing(decision: Decision, result: Result) -> str:
    """What a policy's result comes to, from its findings' verdicts (Decision.verdict): for
    a failed validate policy `fail` when a finding denies, `excepted` when a PolicyException
    covers them all, else `warn` (a warn or audit policy, a violation an UPDATE keeps, a
    denial dry-run mode only reports); any other result its status. The summary and the
    PolicyReport count this."""
    if result.status != "fail":
        return result.status
    said = decision.verdicts(result)
    if "deny" in said:
        return "fail"
    return "excepted" if all(verdict == "excepted" for verdict in said) else "warn"


def error_line(document: Document, decision: Decision) -> str:
    """An error for stderr: where, what, and what to do."""
    problem = next((r.reason for r in decision.results if r.status == "error"), "")
    if document.error:
        where = document.file if not document.line else \
            f"{document.file}:{document.line}:{document.column}"
    else:
        where = f"{document.file}:{document.line}:{document.column} {decision.resource}"
    template = bool(document.error) and _looks_like_template(document.file)
    return f"{where}: {problem}; {hint(problem, template)}"


def is_object(obj: Any) -> bool:
    return (isinstance(obj, dict) and isinstance(obj.get("apiVersion"), str)
            and isinstance(obj.get("kind"), str))


def run_task(task: Sequence[Source], policies: PolicySet, render: Render,
             read: Mapping[str, bytes] | None, review: Review | None = None,
             strict: bool = False) -> Part:
    """Read, judge and render the sources of one task. `read`: the bytes of sources read
    already, by name (Input.read; `-` is stdin); `review`: the run's (see judge)."""
    part = Part(None)
    with _without_cyclic_gc():
        # The verdicts are freed as soon as they are rendered, while the collector is still
        # off: switched back on, it would otherwise scan all of them once more first.
        part.rendered = render(_judge_task(task, policies, read or {}, part, review, strict))
    return part


def _judge_task(task: Sequence[Source], policies: PolicySet, read: Mapping[str, bytes],
                part: Part, review: Review | None, strict: bool = False) -> list[Judged]:
    judged: list[Judged] = []
    for source in task:
        if source.walked and (why := kustomize_skip(source.name)):
            if source.start == 0:  # once for a file split into pieces
                part.notes.append(f"skipped {source.name}: {why}")
                part.kustomizations += kustomize.is_kustomization(source.name)
            continue
        documents: Iterator[Document] = read_source(source, read.get(source.name))
        if source.walked:
            documents = _skip_non_manifests(source, documents, part.notes)
        # Read the piece whole, then judge: alternating parser and engine document by
        # document is measurably slower, and a piece is at most about TASK_BYTES.
        for document in list(documents):
            decision = judge(document, policies, review, strict)
            judged.append(Judged(document, decision))
            count(decision, part.counts)
            if decision.outcome == "error":
                part.errors.append(error_line(document, decision))
    return judged


def kustomize_skip(name: str) -> str:
    """Why a file found in a directory walk is kustomize's input rather than an object."""
    if kustomize.is_kustomization(name):
        return ("a kustomization; check what it builds: kustomize build "
                f"{os.path.dirname(name) or '.'} | quickq-guard check -")
    listed = kustomize.listed_patch(name)
    return f"a kustomize patch ({listed}); check the output of kustomize build instead" \
        if listed else ""


# PyYAML's words for a tag it has no constructor for (`!!python/name:` in an mkdocs.yml,
# `!workspace` in an application's test data): valid YAML for its application, and no
# Kubernetes object, since the API server reads no custom tag.
APPLICATION_TAG = "could not determine a constructor for the tag"


def _skip_non_manifests(source: Source, documents: Iterator[Document],
                        notes: list[str]) -> Iterator[Document]:
    """In a directory walk, a file (or piece of one) that holds no Kubernetes object (a Helm
    values file, a JSON Schema, an unrendered template) is skipped with a note."""
    held: list[Document] = []
    for document in documents:
        if not is_object(document.obj):
            held.append(document)
            continue
        if held:
            yield from held
        held = []
        yield document
        yield from documents
        return
    if not held:
        return
    tagged = any(APPLICATION_TAG in d.error for d in held)
    if (any(d.error and APPLICATION_TAG not in d.error for d in held)
            and not _looks_like_template(source.name)):
        yield from held  # broken YAML that is not a template stays an error
        return
    what = ("an unrendered Helm template (render it with helm template to check it)"
            if _looks_like_template(source.name)
            else "no Kubernetes object (YAML with an application's tags, such as "
            "!!python/name:)" if tagged
            else "no Kubernetes object (no apiVersion and kind)")
    notes.append(f"skipped {source.name}: {what}")


def _looks_like_template(name: str) -> bool:
    try:
        return b"{{" in read_regular(name)
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Input:
    """A run's input, its bytes read once: the tasks, their size in bytes, the few sources
    whose bytes name a PolicyException, a DRA claim or a TrainJob (only those are parsed
    before judging), and the bytes read, by source name (`-`: stdin), up to KEPT_BYTES in
    all."""

    tasks: list[list[Source]]
    size: int
    exceptions: list[Source]
    claims: list[Source]
    read: dict[str, bytes] = field(default_factory=dict)
    train_jobs: list[Source] = field(default_factory=list)


def tasks(paths: Sequence[str], exclude: Sequence[str],
          stdin: bytes | None) -> list[list[Source]]:
    """The sources to read, split into large-file pieces and grouped into tasks, in order."""
    return scan(paths, exclude, stdin).tasks


def scan(paths: Sequence[str], exclude: Sequence[str], stdin: bytes | None,
         named_as_walked: bool = False) -> Input:
    """The Input of `paths`: each file is read once here (and again only by whoever judges
    it), instead of once to size it and once more per kind of object looked for.
    `named_as_walked`: see manifest_sources."""
    pieces: list[tuple[Source, int]] = []
    exceptions: list[Source] = []
    claims: list[Source] = []
    train_jobs: list[Source] = []
    read: dict[str, bytes] = {}
    kept = 0
    for source in manifest_sources(paths, exclude, named_as_walked):
        try:
            data = (stdin or b"") if source.name == "-" else (
                _source_bytes(source) if source.exists else b"")
        except OSError:
            data = b""  # reported when the source is judged
        else:
            if source.name == "-" or (source.exists and kept + len(data) <= KEPT_BYTES):
                read[source.name] = data
                kept += len(data)
        if _EXCEPTION_MARKER in data:
            exceptions.append(source)
        if _CLAIM_MARKER in data:
            claims.append(source)
        if _TRAIN_JOB_MARKER in data:
            train_jobs.append(source)
        if len(data) <= TASK_BYTES:
            pieces.append((source, len(data)))
            continue
        for start, end, line in split(data, TASK_BYTES):
            piece = Source(source.name, walked=source.walked, start=start, end=end, line=line)
            pieces.append((piece, (len(data) if end == -1 else end) - start))
    grouped: list[list[Source]] = []
    current: list[Source] = []
    current_bytes = 0
    for source, size in pieces:
        if current and (current_bytes + size > TASK_BYTES or len(current) >= TASK_FILES):
            grouped.append(current)
            current, current_bytes = [], 0
        current.append(source)
        current_bytes += size
    if current:
        grouped.append(current)
    return Input(grouped, sum(size for _, size in pieces), exceptions, claims, read,
                 train_jobs)


_EXCEPTION_MARKER = KIND.encode()


def _size(source: Source, read: Mapping[str, bytes]) -> int:
    if source.name == "-":
        return len(read.get("-", b""))
    try:
        return os.stat(source.name).st_size if source.exists else 0
    except OSError:
        return 0


def _forking() -> ForkContext | None:
    """The fork start method, where there is one. multiprocessing is imported only for input
    large enough to share out: `check` of one small file starts without it."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        return None
    return multiprocessing.get_context("fork")


def _go_started() -> bool:
    """Whether this process runs Go (CEL policies, webhook.engine.cel.kubecel): a process
    forked from it may hang, so it judges alone."""
    module = sys.modules.get("webhook.engine.cel.kubecel")
    return module is not None and bool(module.loaded())


def workers_for(work: Sequence[Sequence[Source]], jobs: int, total: int) -> int:
    """How many processes judge: 1 (this one), or the workers forked for large input (jobs:
    0 = one per CPU when the input is large enough to gain from it)."""
    workers = min(jobs if jobs > 0 else _cpus(), len(work))
    return 1 if workers <= 1 or (jobs <= 0 and total < PARALLEL_MIN_BYTES) else workers


def load_for_workers(load: Callable[[], PolicySet]) -> PolicySet:
    """The policies for forked workers: loaded first in a throwaway process (forked before
    any Go runs here), which finds their problems as a load does, then here with their CEL
    compiled later, in each worker (webhook.engine.cel.later), so that the Go runtime never
    starts in the process that forks. With a problem, loaded here as usual, which raises it."""
    forking = _forking()
    if forking is None or _go_started():
        return load()
    global _loader
    _loader = load
    try:
        with forking.Pool(1) as pool:
            loads = pool.apply(_loads_quietly)
    finally:
        _loader = None
    if not loads:
        return load()
    from webhook.engine import cel

    with cel.later():
        return load()


_loader: Callable[[], PolicySet] | None = None  # set in the parent just before the fork


def _loads_quietly() -> bool:
    """Whether the policies load, in the throwaway process (what it would print, the
    process that judges prints)."""
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    assert _loader is not None
    try:
        _loader()
    except Exception:
        return False
    return True


def judge_all(work: list[list[Source]], policies: PolicySet, render: Render, jobs: int,
              read: Mapping[str, bytes] | None, review: Review | None = None,
              size: int | None = None, strict: bool = False) -> Iterator[Part]:
    """Each task's Part, in order. jobs: 0 = one process per CPU when the input is large
    enough to gain from it, 1 = this process only. read: the bytes of sources read already
    (Input.read; `-` is stdin). review: the run's (see judge). size: the input's bytes, if
    known. With CEL policies, workers are forked only if the Go runtime has not started here
    (see load_for_workers)."""
    read = read or {}
    total = size if size is not None else sum(
        _size(source, read) for task in work for source in task)
    workers = workers_for(work, jobs, total)
    forking = None if workers <= 1 or _go_started() else _forking()
    if forking is None:
        for task in work:
            yield run_task(task, policies, render, read, review, strict)
        return
    global _worker_job
    _worker_job = (policies, render, read, review, strict)
    try:
        with forking.Pool(workers) as pool:
            _worker_job = None  # the workers have their copy; the parent needs none
            pending: deque[Any] = deque()
            for task in work:
                pending.append(pool.apply_async(_run_in_worker, (task,)))
                if len(pending) > 2 * workers:  # back-pressure: a bounded number in flight
                    yield pending.popleft().get()
            while pending:
                yield pending.popleft().get()
    finally:
        _worker_job = None


# Set in the parent just before the fork, so the workers inherit the policies, the renderer,
# the bytes read already and the review (exceptions, claims) instead of having them pickled
# for every task.
_worker_job: tuple[PolicySet, Render, Mapping[str, bytes], Review | None, bool] | None = None


def _run_in_worker(task: list[Source]) -> Part:
    assert _worker_job is not None
    policies, render, read, review, strict = _worker_job
    return run_task(task, policies, render, read, review, strict)


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Reading and judging allocate millions of dicts and lists that reference counting
    frees, and none that form cycles; the cyclic collector would still rescan the growing
    heap over and over. Off while judging a task: with it on, `check` of the 5,000-file
    corpus takes 1.2-1.3x the wall time, 1.13-1.20x the CPU (cli_bench's corpus, 2026-12-07)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
