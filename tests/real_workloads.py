"""Manifests shaped like the ones public projects ship (tests/workloads/*.yaml), and what the
engine, the CLI and the webhook each say about them, reduced to comparable verdicts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch

from webhook import Decision, decode, evaluate, load_policies
from webhook.manifests import read_file

WORKLOADS = Path(__file__).resolve().parent / "workloads"


def names() -> list[str]:
    return sorted(path.name for path in WORKLOADS.glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    [document] = read_file(WORKLOADS / name)
    obj: dict[str, Any] = document.obj
    return obj


def decide(name: str, decoded: bool = False) -> Decision:
    """The engine's verdict on a workload file with the shipped policies, on the file's
    object as it is given, or (`decoded`) as `kubectl apply` hands it to the webhook."""
    obj = load(name)
    return evaluate(decode(obj) if decoded else obj, load_policies())


def verdict(decision: Decision) -> dict[str, Any]:
    """What the three interfaces must agree on: admitted or not, the patch, and which
    policies deny, warn or record an audit annotation."""
    return {
        "allowed": decision.allowed,
        "patch": list(decision.patch),
        "denied": sorted({r.policy for r in decision.results
                          if r.status == "fail" and r.action == "enforce"}),
        "warned": sorted({r.policy for r in decision.results
                          if r.status == "fail" and r.action == "warn"}),
        "audited": sorted(decision.audit_annotations),
    }


def cli_verdict(report: dict[str, Any]) -> dict[str, Any]:
    """The same verdict read from one resource's rows of `check --output json`."""
    rows = report["results"]
    patch = [op for row in rows if row["result"] == "patch" and row["action"] == "enforce"
             for op in row["patch"]]
    failed = [row for row in rows if row["result"] == "fail"]
    return {
        "allowed": not any(row["action"] == "enforce" for row in failed),
        "patch": patch,
        "denied": sorted(row["policy"] for row in failed if row["action"] == "enforce"),
        "warned": sorted(row["policy"] for row in failed if row["action"] == "warn"),
        "audited": sorted(row["policy"] for row in failed if row["action"] == "audit"),
    }


def patched(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), patch)
    return result
