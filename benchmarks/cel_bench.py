"""CEL policies: evaluations per second of a typical three-expression policy on a typical Pod,
and the time to load 100 CEL policies. One process, one core.

    python benchmarks/cel_bench.py
    python benchmarks/cel_bench.py --json

Targets: >= 10,000 evaluations/s of the policy, and 100 policies loaded in under 1 s. The
built-in policies' own speed is engine_bench.py's to show.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_load import typical_pod

from webhook.engine.evaluate import evaluate
from webhook.engine.policy import PolicySet
from webhook.loader import load_policies

TARGET_EVALS = 10_000
TARGET_LOAD_S = 1.0


def policy(number: int = 0) -> dict[str, Any]:
    """A typical CEL policy: three checks on every container."""
    return {
        "id": f"container-hygiene-{number}",
        "description": "Containers are not privileged, pin their image and request cpu.",
        "type": "validate",
        "action": "enforce",
        "scope": "container",
        "params": {"registry": f"registry{number}.example.com/"},
        "validations": [
            {"expression": "!container.?securityContext.?privileged.orValue(false)",
             "message": "runs privileged; set securityContext.privileged: false",
             "fieldPath": "securityContext.privileged"},
            {"expression": "!container.image.endsWith(':latest')",
             "messageExpression": "'image ' + container.image + ' uses the latest tag'",
             "fieldPath": "image"},
            {"expression": "'cpu' in container.?resources.?requests.orValue({})",
             "message": "add resources.requests.cpu", "fieldPath": "resources.requests"},
        ],
    }


def write(directory: Path, count: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for number in range(count):
        (directory / f"policy-{number:03d}.yaml").write_text(yaml.safe_dump(policy(number)))
    return directory


def per_second(obj: Any, policies: PolicySet, seconds: float, repeat: int) -> float:
    """Evaluations per second of CPU time (per core: time spent waiting for a core on a
    shared machine is not counted)."""
    rates = []
    for _ in range(repeat):
        done, start = 0, time.process_time()
        while (elapsed := time.process_time() - start) < seconds:
            evaluate(obj, policies)  # as the webhook calls it: as the API server hands it over
            done += 1
        rates.append(done / elapsed)
    return statistics.median(rates)


def load_seconds(directory: Path, repeat: int) -> float:
    """Wall time: reading the files is part of loading."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        load_policies(directory)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="per timed loop")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", type=int, default=100, help="CEL policies to load")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    pod = typical_pod()
    with tempfile.TemporaryDirectory() as tmp:
        one = load_policies(write(Path(tmp) / "one", 1))
        many = write(Path(tmp) / "many", args.policies)
        assert evaluate(pod, one).outcome == "allowed", "the typical Pod passes the policy"
        cel_rate = per_second(pod, one, args.seconds, args.repeat)
        defaults = load_policies()
        both = PolicySet(defaults.policies + one.policies, defaults.config)
        default_rate = per_second(pod, defaults, args.seconds, args.repeat)
        both_rate = per_second(pod, both, args.seconds, args.repeat)
        loading = load_seconds(many, args.repeat)
    containers = len(pod["spec"]["containers"])
    figures = {
        "python": sys.version.split()[0],
        "containers": containers,
        "cel_policy_evals_per_s": round(cel_rate),
        "default_policies_evals_per_s": round(default_rate),
        "default_plus_cel_evals_per_s": round(both_rate),
        "policies_loaded": args.policies,
        "load_s": round(loading, 3),
        "evals_target_met": cel_rate >= TARGET_EVALS,
        "load_target_met": loading < TARGET_LOAD_S,
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"evaluate(), one process (Python {figures['python']}), the webhook's typical review "
          f"Pod ({containers} containers); per second of CPU time, median of {args.repeat} x "
          f"{args.seconds}s")
    print(f"  one three-expression CEL policy (scope: container): {cel_rate:>9,.0f}/s "
          f"(target >= {TARGET_EVALS:,}: {'met' if figures['evals_target_met'] else 'NOT met'})")
    print(f"  the {len(defaults.policies)} default policies:                    "
          f"{default_rate:>9,.0f}/s")
    print(f"  the defaults and the CEL policy:                 {both_rate:>9,.0f}/s")
    print(f"  load_policies() of {args.policies} CEL policies: {loading * 1000:,.0f} ms "
          f"(target < {TARGET_LOAD_S:.0f} s: "
          f"{'met' if figures['load_target_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
