"""load_policies() of many container-scope CEL policies with variables, this checkout against
another checkout's, in one process, timed alternately (as engine_ab.py): what compiling each
expression and variable costs when a policy set loads (the webhook's start and every reload,
each `quickq-guard check`).

    git worktree add --detach /tmp/before <commit>
    python benchmarks/cel_load.py /tmp/before                 # 200 policies, 5 variables each
    python benchmarks/cel_load.py /tmp/before --policies 500 --variables 8
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine_ab import import_other

import webhook

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
        folder = Path(tmp) / "policies"
        folder.mkdir()
        write(folder, args.policies, min(args.variables, len(_VARIABLES)))
        sides = {"before": before.load_policies, "after": webhook.load_policies}
        best = dict.fromkeys(sides, float("inf"))
        for _ in range(args.rounds):
            for side, load in sides.items():
                start = time.process_time()
                loaded = load(folder)
                best[side] = min(best[side], time.process_time() - start)
                assert len(loaded.policies) >= args.policies
        print(f"load_policies of {args.policies} container-scope CEL policies with "
              f"{args.variables} variables each, best of {args.rounds} alternating rounds "
              f"(CPU seconds): before {best['before']:.3f}  after {best['after']:.3f}  "
              f"after/before {best['after'] / best['before']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
