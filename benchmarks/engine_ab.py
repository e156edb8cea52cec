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


Call = Callable[[Any, Any], Any]


def calls(engine: Any) -> dict[str, Call | None]:
    """How each row calls one side's engine, in the API that side has: decode() then
    evaluate(obj, policies, review) since the engine's API has two steps, keywords of
    evaluate() before (a side without the offline model has no check's path)."""
    evaluate = engine.evaluate
    if hasattr(engine, "decode"):
        decode = engine.decode
        return {"given": lambda o, p: evaluate(o, p),
                "handed over": lambda o, p: evaluate(o, p),
                "check": lambda o, p: evaluate(decode(o), p)}
    keywords = inspect.signature(evaluate).parameters
    if "as_applied" not in keywords:
        return {"given": lambda o, p: evaluate(o, p),
                "handed over": lambda o, p: evaluate(o, p, from_api_server=True),
                "check": None}
    return {"given": lambda o, p: evaluate(o, p, as_applied=False),
            "handed over": lambda o, p: evaluate(o, p, from_api_server=True),
            "check": lambda o, p: evaluate(o, p, as_applied=True)}


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
        sides = {"before": (calls(before), before.load_policies(
                     args.policies, before.load_config(args.config))),
                 "after": (calls(webhook), webhook.load_policies(
                     args.policies, webhook.load_config(args.config)))}
        typical = next(read_text(TYPICAL_POD.read_bytes(), str(TYPICAL_POD))).obj
        # name -> (object, how it is called). "given": the object as given (before the
        # two-step API, as_applied=False also checked it against its kind's schema; since,
        # it is taken as the API server hands it over). "handed over": as the webhook calls
        # it. "check": what `quickq-guard check` runs (decoded as kubectl apply hands it to
        # the webhook, then judged).
        objects: dict[str, tuple[Any, str]] = {
            "Pod (examples/good/pod.yaml)": (typical, "given"),
            "webhook review Pod": (typical_pod(), "given"),
            "webhook review Pod, as the webhook": (typical_pod(), "handed over")}
        if all(way["check"] is not None for way, _ in sides.values()):
            objects["check's path, typical Pod"] = (typical, "check")
        print(f"default policies: before {len(sides['before'][1].policies)}, after "
              f"{len(sides['after'][1].policies)}; best of {args.rounds} alternating rounds of "
              f"{args.seconds}s per side")
        for name, (obj, way) in objects.items():
            best = dict.fromkeys(sides, 0.0)
            for _ in range(args.rounds):
                for side, (ways, policies) in sides.items():
                    call = ways[way]
                    assert call is not None
                    rate = best_rate(lambda c=call, p=policies, o=obj: c(o, p), args.seconds)
                    best[side] = max(best[side], rate)
            print(f"  {name:<32} before {best['before']:>9,.0f}/s  after "
                  f"{best['after']:>9,.0f}/s  after/before {best['after'] / best['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
