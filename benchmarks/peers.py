"""`quickq-guard check` against the tools a user would pick instead: gator (Gatekeeper's CLI)
and the Kyverno CLI, on the same corpus with the same seven policies, timed in alternating
rounds, with each object's verdicts compared.

    python benchmarks/peers.py                       # builds the peers on its first run
    python benchmarks/peers.py --rounds 5 --count 5000
    python benchmarks/peers.py --only gator          # leave the Kyverno CLI out (slowest)
    python benchmarks/peers.py --gator PATH          # a gator of your own instead of the build

The peers are built from Go modules at pinned versions (Go and the Go module proxy; nothing
prebuilt): gator with `go install` at GATOR, the Kyverno CLI from the wrapper module in
benchmarks/peers/kyverno/ (its go.mod pins KYVERNO and repeats the one `replace` Kyverno's
own go.mod has, which `go install` would ignore). Both land in benchmarks/out/peers/bin/
(git-ignored), built with `nice`; a binary already built at the pinned version is kept.

The policies: quickq-guard's seven default validate policies that are on, judge pods and both
peers can express (require-requests, disallow-latest-tag, disallow-root-user,
require-gpu-limits, no-plaintext-secrets, liveness-probe-tolerance, require-labels),
written for the peers in benchmarks/peers/policies/ (Rego ConstraintTemplates and their
Constraints; Kyverno ClusterPolicies, autogen writing the controllers' rules). quickq-guard
loads the same seven from policies/. Every tool gets the whole corpus (`corpus.py`, one object
per file, also NodeTemplates, Services and ConfigMaps, which the peers' policies do not
match); agreement is compared on the objects all three judge: Pods, Deployments,
StatefulSets, Jobs and CronJobs outside kube-system.

Each round runs every tool once, in turn, in a different order each round, so a shared
machine's load weighs on all; the medians are reported. Outputs stay under
$TMPDIR/quickq-guard-peers/ (outside the checkout: `check DIR` leaves out what .gitignore
ignores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cli_bench
from cli_bench import Run

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(__file__).resolve().parent / "peers"
BIN = Path(__file__).resolve().parent / "out" / "peers" / "bin"
OUT = Path(tempfile.gettempdir()) / "quickq-guard-peers"
GATOR = "v3.23.1"
GATOR_MODULE = "github.com/open-policy-agent/gatekeeper/v3/cmd/gator"
KYVERNO = "v1.19.1"  # also in benchmarks/peers/kyverno/go.mod, which is what builds it
KYVERNO_PACKAGE = "github.com/kyverno/kyverno/cmd/cli/kubectl-kyverno"
POLICIES = ("require-requests", "disallow-latest-tag", "disallow-root-user",
            "require-gpu-limits", "no-plaintext-secrets", "liveness-probe-tolerance",
            "require-labels")
COMPARED_KINDS = {"Pod", "Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet",
                  "ReplicaSet", "ReplicationController"}
SYSTEM_NAMESPACES = {"kube-system", "kube-public", "kube-node-lease"}
LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

Key = tuple[str, str, str]  # kind, namespace, name
Verdicts = dict[Key, frozenset[str]]  # the policies that fail each object


class SetupError(Exception):
    """A peer could not be built: the message says which and why."""


def build(name: str, version: str, command: list[str], cwd: Path | None = None) -> Path:
    """The peer's binary at `version`, built unless a stamp says it already is."""
    binary = BIN / name
    stamp = BIN / f"{name}.version"
    if binary.exists() and stamp.exists() and stamp.read_text() == version:
        return binary
    if shutil.which("go") is None:
        raise SetupError(f"building {name} {version} needs Go (https://go.dev/dl/) on PATH")
    BIN.mkdir(parents=True, exist_ok=True)
    print(f"building {name} {version} from Go modules (several minutes the first time)...",
          file=sys.stderr)
    env = {**os.environ, "GOBIN": str(BIN)}
    done = subprocess.run(["nice", *command], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0 or not binary.exists():
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise SetupError(f"building {name} {version} failed: {' '.join(command)}\n{tail}")
    stamp.write_text(version)
    return binary


def build_gator() -> Path:
    return build("gator", GATOR, ["go", "install", f"{GATOR_MODULE}@{GATOR}"])


def build_kyverno() -> Path:
    return build("kyverno", KYVERNO, ["go", "build", "-o", str(BIN / "kyverno"),
                                      KYVERNO_PACKAGE], cwd=PEERS / "kyverno")


def policy_dir(out: Path) -> Path:
    """The seven policies, as quickq-guard ships them, in a folder of their own."""
    folder = out / "policies"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for policy in POLICIES:
        shutil.copy(ROOT / "policies" / f"{policy}.yaml", folder)
    return folder


def compared(corpus: Path) -> dict[Key, str]:
    """The objects every tool judges, by key, with their file's name."""
    objects: dict[Key, str] = {}
    for path in sorted(corpus.glob("*.yaml")):
        obj = yaml.load(path.read_text(), Loader=LOADER)
        meta = obj.get("metadata", {})
        key = (obj["kind"], meta.get("namespace", "default"), meta["name"])
        if key[0] in COMPARED_KINDS and key[1] not in SYSTEM_NAMESPACES:
            objects[key] = path.name
    return objects


def quickq_verdicts(report: Path) -> Verdicts:
    failing: dict[Key, set[str]] = {}
    for result in json.loads(report.read_text())["results"]:
        resource = result["resource"]
        key = (resource["kind"], resource.get("namespace") or "default", resource["name"])
        failing.setdefault(key, set())
        if result["result"] in ("fail", "error") and result["policy"]:
            failing[key].add(result["policy"])
    return {key: frozenset(policies) for key, policies in failing.items()}


def gator_verdicts(report: Path) -> Verdicts:
    """`gator test -o json`: one entry per violation, naming its constraint and object."""
    failing: dict[Key, set[str]] = {}
    text = report.read_text().strip()
    for violation in json.loads(text) if text else []:
        obj = violation.get("violatingObject") or violation.get("object") or {}
        meta = obj.get("metadata", {})
        key = (obj.get("kind", ""), meta.get("namespace", "default"), meta.get("name", ""))
        constraint = violation.get("constraint", {}).get("metadata", {}).get("name", "")
        failing.setdefault(key, set()).add(constraint)
    return {key: frozenset(policies) for key, policies in failing.items()}


def kyverno_verdicts(report: Path) -> Verdicts:
    """`kyverno apply --policy-report` prints a report (after its warnings): a result per
    policy and object."""
    failing: dict[Key, set[str]] = {}
    text = report.read_text()
    start = text.find("apiVersion:")
    for document in yaml.load_all(text[start:] if start >= 0 else "", Loader=LOADER):
        for result in (document or {}).get("results") or []:
            for resource in result.get("resources") or []:
                key = (resource.get("kind", ""), resource.get("namespace", "default"),
                       resource.get("name", ""))
                failing.setdefault(key, set())
                if result.get("result") in ("fail", "error"):
                    failing[key].add(result["policy"])
    return {key: frozenset(policies) for key, policies in failing.items()}


def agreement(objects: dict[Key, str], ours: Verdicts, theirs: Verdicts,
              peer: str) -> tuple[int, list[str]]:
    """How many objects get the same failing policies from both, and a line per difference
    kind (policy, who fails it) with its count and one example."""
    same = 0
    differences: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], str] = {}
    for key, file in objects.items():
        mine, other = ours.get(key, frozenset()), theirs.get(key, frozenset())
        if mine == other:
            same += 1
        for policy in mine - other:
            differences[(policy, "quickq-guard only")] += 1
            example.setdefault((policy, "quickq-guard only"), file)
        for policy in other - mine:
            differences[(policy, f"{peer} only")] += 1
            example.setdefault((policy, f"{peer} only"), file)
    lines = [f"  {policy}: fails by {who} on {count} objects, e.g. {example[(policy, who)]}"
             for (policy, who), count in sorted(differences.items())]
    return same, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("gator", "kyverno"), action="append",
                        help="time only this peer beside quickq-guard (repeatable)")
    parser.add_argument("--gator", type=Path, metavar="PATH", help="this gator, not the build")
    parser.add_argument("--kyverno", type=Path, metavar="PATH",
                        help="this Kyverno CLI, not the build")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    parser.add_argument("--out", type=Path, default=OUT, help="where the corpus and outputs go")
    args = parser.parse_args(argv)
    peers = args.only or ["gator", "kyverno"]

    try:
        builders = {"gator": build_gator, "kyverno": build_kyverno}
        given = {"gator": args.gator, "kyverno": args.kyverno}
        built = {peer: given[peer] or builders[peer]() for peer in peers}
    except SetupError as error:
        print(f"peers.py: {error}", file=sys.stderr)
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus"
    files, size = cli_bench.ensure_corpus(corpus, args.count, args.seed)
    policies = policy_dir(out)
    guard = shutil.which("quickq-guard", path=str(Path(sys.executable).parent))
    ours = [guard] if guard else [sys.executable, "-m", "webhook.cli"]
    commands: dict[str, list[str]] = {
        "quickq-guard": [*ours, "check", "-o", "json", "--policies", str(policies),
                         str(corpus)],
        "gator": [str(built.get("gator", "")), "test", "-o", "json",
                  "-f", str(PEERS / "policies" / "gatekeeper.yaml"), "-f", str(corpus)],
        "kyverno": [str(built.get("kyverno", "")), "apply",
                    str(PEERS / "policies" / "kyverno.yaml"), "--resource", str(corpus),
                    "--policy-report"],
    }
    names = ["quickq-guard", *peers]
    runs: dict[str, list[Run]] = {name: [] for name in names}
    for round_ in range(args.rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            run = cli_bench.measure(commands[name], out / f"{name}-{round_ + 1}.out",
                                    args.timeout)
            runs[name].append(run)
            print(f"round {round_ + 1}: {name} {run.wall:.2f} s wall, exit {run.code}",
                  file=sys.stderr)

    objects = compared(corpus)
    verdicts = {"quickq-guard": quickq_verdicts(out / "quickq-guard-1.out")}
    if "gator" in peers:
        verdicts["gator"] = gator_verdicts(out / "gator-1.out")
    if "kyverno" in peers:
        verdicts["kyverno"] = kyverno_verdicts(out / "kyverno-1.out")
    medians = {name: cli_bench._median(their_runs) for name, their_runs in runs.items()}
    mine = medians["quickq-guard"]
    print(f"corpus: {files} files, {size / 1e6:.2f} MB; {len(objects)} objects compared "
          f"(Pods and pod controllers outside the system namespaces); the seven policies: "
          f"{', '.join(POLICIES)}; {args.rounds} alternating rounds, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print(f"{'tool':<28} {'wall s':>8} {'CPU s':>8} {'max RSS MB':>11} {'vs quickq-guard':>16}")
    figures: dict[str, Any] = {"files": files, "compared": len(objects), "rounds": args.rounds}
    for name in names:
        run = medians[name]
        label = {"quickq-guard": "quickq-guard check", "gator": f"gator test {GATOR}",
                 "kyverno": f"kyverno apply {KYVERNO}"}[name]
        ratio = run.wall / mine.wall
        cpu = f"{run.cpu:.2f}" if run.cpu is not None else "-"
        rss = f"{run.rss:.0f}" if run.rss is not None else "-"
        print(f"{label:<28} {run.wall:>8.2f} {cpu:>8} {rss:>11} {ratio:>15.1f}x")
        figures[name] = {"wall_s": round(run.wall, 3), "cpu_s": run.cpu, "max_rss_mb": run.rss,
                         "runs_wall_s": [round(r.wall, 3) for r in runs[name]],
                         "wall_ratio": round(ratio, 2)}
    for peer in peers:
        same, lines = agreement(objects, verdicts["quickq-guard"], verdicts[peer], peer)
        print(f"agreement with {peer}: {same} of {len(objects)} objects "
              f"({100 * same / len(objects):.1f}%) get the same failing policies")
        print("\n".join(lines))
        figures[peer]["agreement"] = same / len(objects)
    (out / "peers.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
