"""evaluate() of this checkout against another checkout's, in one process, timed alternately:
a shared machine's noise moves both sides alike, so the ratio holds where absolute figures
do not. Rates are per second of CPU time, the best of the rounds.

    git worktree add --detach /tmp/before <commit>
    python benchmarks/engine_ab.py /tmp/before          # the default policies, typical Pods
    python benchmarks/engine_ab.py /tmp/before --config restricted.yaml  # e.g. podSecurity
    python benchmarks/engine_ab.py /tmp/before --policies DIR   # the policies in DIR instead

The other checkout's `webhook/` is copied under the name `webhook_before` (its imports
rewritten) into a temporary directory and imported beside this one's.
"""

from __future__ import annotations

import argparse
import inspect
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from webhook_load import typical_pod

import webhook
from webhook.manifests import read_text

TYPICAL_POD = Path(__file__).resolve().parent.parent / "examples" / "good" / "pod.yaml"


def import_other(checkout: Path, into: Path) -> Any:
    """The other checkout's webhook package, as `webhook_before`."""
    target = into / "webhook_before"
    shutil.copytree(checkout / "webhook", target,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for source in target.rglob("*.py"):
        text = source.read_text()
        source.write_text(re.sub(r"\bwebhook\.", "webhook_before.",
                                 re.sub(r"^(from|import) webhook\b", r"\1 webhook_before",
                                        text, flags=re.M)))
    policies = checkout / "policies"
    if policies.is_dir():
        shutil.copytree(policies, target / "policies")
    sys.path.insert(0, str(into))
    import webhook_before

    return webhook_before


def best_rate(run: Callable[[], None], seconds: float) -> float:
    """Calls per second of CPU time: on a shared machine, time spent waiting for a core is
    not the code's."""
    done, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        run()
        done += 1
    return done / elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=0.2, help="per side per round")
    parser.add_argument("--config", help="a config file (e.g. `podSecurity: {enforce: "
                                         "restricted}`), on both sides")
    parser.add_argument("--policies", help="a policy folder in place of the defaults")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = import_other(args.before.resolve(), Path(tmp))
        sides = {"before": (before.evaluate, before.load_policies(
                     args.policies, before.load_config(args.config))),
                 "after": (webhook.evaluate, webhook.load_policies(
                     args.policies, webhook.load_config(args.config)))}
        typical = next(read_text(TYPICAL_POD.read_bytes(), str(TYPICAL_POD))).obj
        # name -> (object, keyword arguments before, after)
        # The object as given on each side (evaluate()'s default became the object as
        # applied, check's path, which has a row of its own).
        given = [{"as_applied": False} if "as_applied" in inspect.signature(
            evaluate).parameters else {} for evaluate, _ in sides.values()]
        objects: dict[str, tuple[Any, dict[str, Any], dict[str, Any]]] = {
            "Pod (examples/good/pod.yaml)": (typical, *given),
            "webhook review Pod": (typical_pod(), *given),
            "webhook review Pod, from_api_server": (typical_pod(), {"from_api_server": True},
                                                    {"from_api_server": True})}
        if "as_applied" in inspect.signature(webhook.evaluate).parameters:
            # What `quickq-guard check` runs on each side: as kubectl apply hands it to the
            # webhook (webhook.engine.normalize), or, on a side without the model, as written.
            applied = [{"as_applied": True} if "as_applied" in inspect.signature(
                evaluate).parameters else {} for evaluate, _ in sides.values()]
            objects["check's path, typical Pod"] = (typical, *applied)
        print(f"default policies: before {len(sides['before'][1].policies)}, after "
              f"{len(sides['after'][1].policies)}; best of {args.rounds} alternating rounds of "
              f"{args.seconds}s per side")
        for name, (obj, *keywords) in objects.items():
            best = dict.fromkeys(sides, 0.0)
            for _ in range(args.rounds):
                for (side, (evaluate, policies)), kw in zip(sides.items(), keywords,
                                                            strict=True):
                    rate = best_rate(lambda e=evaluate, p=policies, o=obj, k=kw: e(o, p, **k),
                                     args.seconds)
                    best[side] = max(best[side], rate)
            print(f"  {name:<32} before {best['before']:>9,.0f}/s  after "
                  f"{best['after']:>9,.0f}/s  after/before {best['after'] / best['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
