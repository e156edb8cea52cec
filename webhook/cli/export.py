"""`quickq-guard export --format vap|map|native`: the policies as the API server's own
admission policies: CEL validate policies as ValidatingAdmissionPolicies
(webhook/export/vap.py), mutate policies as MutatingAdmissionPolicies
(webhook/export/map.py), `native` both, each with its binding.

Exit codes: 0 every policy in force of the format's type was exported; 1 one could not be
(the others are written, and stderr names it and says why); 2 an input, policy or usage
error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.cli.check import load, policy_options
from webhook.cli.exits import EXIT_FAILED, EXIT_OK, CliError, note
from webhook.engine.policy import PolicySet

if TYPE_CHECKING:
    from webhook.export.vap import Exported


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "export", help="write the policies as native admission policies (VAP, MAP)",
        description="Write a ValidatingAdmissionPolicy and its binding for each CEL validate "
                    "policy, a MutatingAdmissionPolicy and its binding for each mutate policy, "
                    "so the API server itself keeps the guardrails when the webhook is down. "
                    "What is not exported is named on stderr with the reason.",
        epilog="Exit codes: 0 every policy in force of the format was exported, 1 one could "
               "not be (the others are written), 2 input, policy or usage error.")
    parser.add_argument("--format", required=True, choices=("vap", "map", "native"),
                        help="vap: ValidatingAdmissionPolicy and its binding; map: "
                             "MutatingAdmissionPolicy (Kubernetes 1.36) and its binding; "
                             "native: both")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write the YAML here instead of to stdout")
    policy_options(parser)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    # The exporters are imported here: every other command starts faster without them.
    from webhook.export.forms import with_cel_forms
    from webhook.export.vap import API_VERSION

    policies = with_cel_forms(load(args))
    exported = _export(policies, args.format)
    objects = exported.objects
    text = _comments(exported) + (
        yaml.safe_dump_all(objects, sort_keys=False, width=100) if objects else "")
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as problem:
            raise CliError(f"{args.output}: cannot write: {problem.strerror}") from None
    else:
        print(text, end="")
    for refusal in exported.refusals:
        note(f"{refusal.policy}: not exported: {refusal.reason}")
    for line in exported.notes:
        note(line)
    count = len(objects) // 2
    note(f"exported {count} {'policy' if count == 1 else 'policies'} as {API_VERSION}")
    return EXIT_FAILED if any(not refusal.expected for refusal in exported.refusals) \
        else EXIT_OK


def _comments(exported: Exported) -> str:
    """What the objects leave to the webhook, on top of the YAML too: the file is what a
    cluster admin keeps, and stderr is gone by then."""
    lines = [f"{refusal.policy}: not exported: {refusal.reason}" for refusal in exported.refusals]
    lines += exported.notes
    return "".join(f"# {' '.join(line.split())}\n" for line in lines)


def _export(policies: PolicySet, format: str) -> Exported:
    """The format's objects; with `native`, the mutate policies vap leaves out are map's."""
    from webhook.export import map as mutating
    from webhook.export import vap
    from webhook.export.vap import Exported

    validating = vap.export(policies) if format != "map" else Exported([], [], [])
    if format == "vap":
        return validating
    mutate = {policy.id for policy in policies.policies if policy.type == "mutate"}
    mutated = mutating.export(policies)
    return Exported(validating.objects + mutated.objects,
                    [r for r in validating.refusals if r.policy not in mutate]
                    + mutated.refusals, validating.notes + mutated.notes)
