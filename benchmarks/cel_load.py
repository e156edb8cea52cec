"""load_policies() of many container-scope CEL policies with variables, this checkout against
another checkout's, in one process, timed alternately (as engine_ab.py): what compiling each
expression and variable costs when a policy set loads (the webhook's start and every reload,
each `quickq-guard check`). Then the CEL policies of Pod Security's restricted level (the
shipped CEL policies with the most variables and validations) judging the typical Pod,
through evaluate() as the webhook calls it with only those policies loaded (so that a
review's one activation is measured as it serves them), per CPU-second of the best round.

    git worktree add --detach /tmp/before <commit>
    python benchmarks/cel_load.py /tmp/before                 # 200 policies, 5 variables each
    python benchmarks/cel_load.py /tmp/before --policies 500 --variables 8
"""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_ab import TYPICAL_POD, calls, import_other

import webhook
from webhook.manifests import read_text

# Variables that read the container and each other, as a policy of a few checks writes them.
_VARIABLES = [
    "container.image",
    "variables.v0.split(':')",
    "container.?securityContext.?privileged.orValue(false)",
    "has(container.ports) ? container.ports.map(p, p.containerPort) : []",
    "variables.v1.size()",
    "container.name + '/' + variables.v0",
    "podSpec.?hostNetwork.orValue(false)",
    "variables.v3.filter(p, p < 1024)",
]
_VALIDATIONS = [
    {"expression": "!variables.v2", "message": "runs privileged"},
    {"expression": "variables.v4 >= 2 && variables.v0 != ''",
     "messageExpression": "'the image ' + variables.v0 + ' has no tag'"},
    {"expression": "variables.v3.all(p, p > 0)", "message": "a port is not positive"},
]


def policy(number: int, variables: int) -> dict[str, Any]:
    names = {f"v{i}" for i in range(variables)}
    return {
        "id": f"load-{number}", "description": "a container check", "type": "validate",
        "action": "enforce", "scope": "container",
        "variables": [{"name": f"v{i}", "expression": _VARIABLES[i % len(_VARIABLES)]}
                      for i in range(variables)],
        "validations": [v for v in _VALIDATIONS if all(
            f"v{i}" in names for i in range(len(_VARIABLES)) if f"variables.v{i}" in str(v))]
        or [{"expression": "container.name != ''"}],
    }


def write(directory: Path, count: int, variables: int) -> None:
    for number in range(count):
        (directory / f"load-{number}.yaml").write_text(yaml.safe_dump(policy(number,
                                                                             variables)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="the other checkout")
    parser.add_argument("--policies", type=int, default=200)
    parser.add_argument("--variables", type=int, default=5, help=f"at most {len(_VARIABLES)}")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = import_other(args.before.resolve(), Path(tmp))
        config = Path(tmp) / "restricted.yaml"
        config.write_text("podSecurity:\n  enforce: restricted\n")
        pod = next(read_text(TYPICAL_POD.read_bytes(), str(TYPICAL_POD))).obj
        judged = {}
        for side, package in (("before", before), ("after", webhook)):
            loaded = package.load_policies(None, package.load_config(config))
            policy_set = importlib.import_module(package.__name__ + ".engine.policy").PolicySet
            judged[side] = (calls(package)["handed over"], policy_set(
                tuple(p for p in loaded.policies if p.cel is not None), loaded.config))
        spent = dict.fromkeys(judged, float("inf"))
        for _ in range(args.rounds * 6):
            for side, (evaluate, programs) in judged.items():
                start = time.process_time()
                for _ in range(50):
                    evaluate(pod, programs)  # as the webhook calls it
                spent[side] = min(spent[side], (time.process_time() - start) / 50)
        count = len(judged["after"][1].policies)
        print(f"the {count} CEL policies of podSecurity restricted on {TYPICAL_POD.name}, best "
              f"of {args.rounds * 6} alternating rounds (us per Pod): before "
              f"{spent['before'] * 1e6:.0f}  after {spent['after'] * 1e6:.0f}  "
              f"after/before {spent['after'] / spent['before']:.3f}")
        folder = Path(tmp) / "policies"
        folder.mkdir()
        write(folder, args.policies, min(args.variables, len(_VARIABLES)))
        sides = {"before": before.load_policies, "after": webhook.load_policies}
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(args.rounds):
            for side, load in sides.items():
                gc.collect()  # the other side's garbage is not this side's time
                gc.disable()
                start = time.process_time()
                loaded = load(folder)
                best[side] = min(best[side], time.process_time() - start)
                gc.enable()
                assert len(loaded.policies) >= args.policies
        print(f"load_policies of {args.policies} container-scope CEL policies with "
              f"{args.variables} variables each, best of {args.rounds} alternating rounds "
              f"(CPU seconds): before {best['before']:.3f}  after {best['after']:.3f}  "
              f"after/before {best['after'] / best['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
