"""Engine evaluations per second: `evaluate()` with all default policies, one process, one core.

The objects come from benchmarks/corpus.py, rendered to YAML and read back with the CLI's
reader, so they are exactly what `quickq-guard check` would judge. Time is this process's CPU
time (the target is per core; on a shared machine, time other processes take the core from it
does not count). Each figure is the median
of --repeat timed loops of about --seconds each.

    python benchmarks/engine_bench.py            # the table
    python benchmarks/engine_bench.py --json     # the same figures, machine-readable
    python benchmarks/engine_bench.py --exceptions 0   # without the rows with exceptions
    python benchmarks/engine_bench.py --config restricted.yaml  # e.g. podSecurity restricted
    PYTHONPATH=/tmp/old python benchmarks/engine_bench.py   # another checkout's webhook/
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

from webhook.engine.decode import decode
from webhook.engine.evaluate import evaluate
from webhook.engine.policy import PolicySet
from webhook.engine.policy_exceptions import Exceptions, index, read_exception
from webhook.engine.review import Review
from webhook.loader import load_config, load_policies
from webhook.manifests import read_text
from webhook.testing import typical_pod

ROOT = Path(__file__).resolve().parent.parent
TYPICAL_POD = ROOT / "examples" / "good" / "pod.yaml"
# The ML workload kinds, shaped like KServe's, Kubeflow's, KubeRay's, JobSet's and
# LeaderWorkerSet's documented manifests (the engine tests judge the same files).
ML_WORKLOADS = ROOT / "tests" / "ml_workloads"
TARGET_POD_EVALS = 20_000


def load_objects(count: int, seed: int) -> dict[str, list[Any]]:
    """The corpus objects by kind, as the CLI reads them."""
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for kind, obj in corpus.objects(count, seed):
        for document in read_text(corpus.render(kind, obj), kind):
            by_kind[kind].append(document.obj)
    return dict(by_kind)


# What the webhook passes along with the object for webhook_load.py's review (the object
# itself as the API server hands it over: not decoded again).
WEBHOOK_REVIEW = Review(
    operation="CREATE", namespace="ml-serving",
    username="system:serviceaccount:kube-system:replicaset-controller",
    groups=("system:serviceaccounts", "system:serviceaccounts:kube-system",
            "system:authenticated"))


def split(policies: PolicySet, policy_type: str) -> PolicySet:
    """The policies of one type, as webhook/reload.py's PolicySets gives /validate and /mutate."""
    return PolicySet(tuple(p for p in policies.policies if p.type == policy_type),
                     policies.config)


def rate(objects: Sequence[Any], policies: PolicySet, seconds: float, repeat: int,
         review: Review | None = None, decoded: bool = False) -> float:
    """Median evaluations per second over `repeat` loops of about `seconds` each: of each
    object as given, or (`decoded`) of decode() and evaluate(), check's path."""
    rates = []
    for _ in range(repeat):
        done, start = 0, time.process_time()
        while True:
            for obj in objects:
                evaluate(decode(obj) if decoded else obj, policies, review)
            done += len(objects)
            elapsed = time.process_time() - start
            if elapsed >= seconds:
                break
        rates.append(done / elapsed)
    return statistics.median(rates)


EXCEPTION_NAMESPACE = "quickq-guard"
NOW = datetime(2026, 12, 1, tzinfo=UTC)  # the evaluation time of the rows with exceptions


def exceptions(count: int, policies: PolicySet) -> Exceptions:
    """`count` honoured exceptions, spread over the validate policies and over team
    namespaces, as a large cluster's would be; none covers the corpus's namespaces."""
    ids = [policy.id for policy in policies.validating]
    expires = (NOW + timedelta(days=30)).isoformat()
    return index(read_exception({
        "apiVersion": "quickq.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": f"team-{number}", "namespace": EXCEPTION_NAMESPACE},
        "spec": {"policies": [{"id": ids[number % len(ids)]}],
                 "match": {"namespaces": [f"team-{number}"], "names": ["vendor-*"]},
                 "expires": expires, "reason": "vendor image"}}) for number in range(count))




def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="corpus objects (default 2000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.5, help="per timed loop")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--exceptions", type=int, default=1000, metavar="N",
                        help="also measure with N PolicyExceptions loaded (default 1000; 0: "
                             "not)")
    parser.add_argument("--config", help="a config file whose settings are added (e.g. "
                                         "`podSecurity: {enforce: restricted}`)")
    args = parser.parse_args(argv)

    config = load_config(args.config).model_copy(
        update={"exceptionNamespaces": (EXCEPTION_NAMESPACE,)})
    policies = load_policies(None, config)
    by_kind = load_objects(args.count, args.seed)
    # The corpus stays in memory for the whole run, which a webhook's heap never holds: keep
    # the cyclic GC from rescanning it (the server likewise freezes what it loads at start).
    gc.collect()
    gc.freeze()
    rows: list[tuple[str, int, float]] = []
    # The rows measure the engine on the object as given (check's path, decode() then
    # evaluate(), has rows of its own below).
    typical = [next(read_text(TYPICAL_POD.read_bytes(), str(TYPICAL_POD))).obj]
    rows.append(("Pod (examples/good/pod.yaml)", 1, rate(typical, policies, args.seconds,
                                                         args.repeat)))
    # The webhook's calls: /validate and /mutate each judge with one type of policy.
    review = [typical_pod()]
    for policy_type in ("validate", "mutate"):
        rows.append((f"webhook /{policy_type}, review Pod", 1,
                     rate(review, split(policies, policy_type), args.seconds, args.repeat,
                          WEBHOOK_REVIEW)))
    for kind in corpus.MIX:
        objects = by_kind.get(kind, [])
        if objects:
            rows.append((kind, len(objects), rate(objects, policies, args.seconds,
                                                  args.repeat)))
    ml = [document.obj for path in sorted(ML_WORKLOADS.glob("*.yaml"))
          for document in read_text(path.read_bytes(), str(path))]
    for obj in ml:
        rows.append((f"{obj['kind']} ({obj['apiVersion'].split('/')[0]})", 1,
                     rate([obj], policies, args.seconds, args.repeat)))
    rows.append(("ML kinds, all of the above", len(ml), rate(ml, policies, args.seconds,
                                                               args.repeat)))
    mixed = [obj for objects in by_kind.values() for obj in objects]
    # What `quickq-guard check` runs: decode(), the object as kubectl apply hands it to the
    # webhook (checked and defaulted in one walk), then evaluate().
    rows.append(("check's path: Pod (examples/good/pod.yaml)", 1,
                 rate(typical, policies, args.seconds, args.repeat, decoded=True)))
    rows.append(("check's path: all (mixed corpus)", len(mixed),
                 rate(mixed, policies, args.seconds, args.repeat, decoded=True)))
    rows.append(("all (mixed corpus)", len(mixed), rate(mixed, policies, args.seconds,
                                                        args.repeat)))

    if args.exceptions:
        loaded = Review(exceptions=exceptions(args.exceptions, policies), now=NOW)
        with_them = f"with {args.exceptions:,} exceptions"
        rows.append((f"Pod (examples/good/pod.yaml) {with_them}", 1,
                     rate(typical, policies, args.seconds, args.repeat, loaded)))
        rows.append((f"check's path: Pod (examples/good/pod.yaml) {with_them}", 1,
                     rate(typical, policies, args.seconds, args.repeat, loaded, decoded=True)))
        rows.append((f"webhook /validate, review Pod {with_them}", 1,
                     rate(review, split(policies, "validate"), args.seconds, args.repeat,
                          replace(WEBHOOK_REVIEW, exceptions=loaded.exceptions, now=NOW))))
        rows.append((f"Pod {with_them}", len(by_kind.get("Pod", [])),
                     rate(by_kind.get("Pod", []), policies, args.seconds, args.repeat,
                          loaded)))
        rows.append((f"all (mixed corpus) {with_them}", len(mixed),
                     rate(mixed, policies, args.seconds, args.repeat, loaded)))

    typical_rate = rows[0][2]
    pod_rate = next(r for name, _, r in rows if name == "Pod")
    applied_rate = next((r for name, _, r in rows
                         if name == "check's path: Pod (examples/good/pod.yaml)"), None)
    if args.json:
        print(json.dumps({"policies": len(policies.policies), "python": sys.version.split()[0],
                          "rows": [{"kind": n, "objects": c, "evals_per_s": round(r)}
                                   for n, c, r in rows],
                          "pod_target": TARGET_POD_EVALS,
                          "typical_pod_target_met": typical_rate >= TARGET_POD_EVALS,
                          "corpus_pods_target_met": pod_rate >= TARGET_POD_EVALS,
                          "typical_pod_as_applied_target_met": applied_rate is not None
                          and applied_rate >= TARGET_POD_EVALS}, indent=2))
        return 0
    print(f"evaluate() with {len(policies.policies)} default policies, one process "
          f"(Python {sys.version.split()[0]}); median of {args.repeat} x {args.seconds}s; "
          f"webhook from {Path(sys.modules['webhook'].__file__ or '').parent}")
    print(f"{'kind':<58}{'objects':>8}{'evals/s':>12}{'us/eval':>10}")
    for name, count, value in rows:
        print(f"{name:<58}{count:>8}{value:>12,.0f}{1e6 / value:>10.1f}")
    def verdict(value: float) -> str:
        return f"{value:,.0f}/s, " + ("met" if value >= TARGET_POD_EVALS else "NOT met")

    print(f"target >= {TARGET_POD_EVALS:,} Pod evals/s on one core: typical Pod "
          f"{verdict(typical_rate)}"
          + (f" as given, {verdict(applied_rate)} as applied (check's path)"
             if applied_rate is not None else "")
          + f"; the corpus's Pods (most get patched) {verdict(pod_rate)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
