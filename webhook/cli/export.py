"""`quickq-guard export --format vap`: the CEL validate policies as Kubernetes
ValidatingAdmissionPolicies and bindings (the translation is webhook/export/vap.py).

Exit codes: 0 every CEL validate policy in force was exported; 1 one could not be (the others
are written, and stderr says why); 2 an input, policy or usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from webhook.cli.check import load, policy_options
from webhook.cli.exits import EXIT_FAILED, EXIT_OK, CliError, note
from webhook.export.vap import API_VERSION, export


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "export", help="write the CEL policies as ValidatingAdmissionPolicies",
        description="Write a ValidatingAdmissionPolicy and a ValidatingAdmissionPolicyBinding "
                    "for each CEL validate policy, so the API server itself keeps the "
                    "guardrails when the webhook is down. Built-in rules, mutate policies and "
                    "policies that are off are not exported; stderr names each and says why.",
        epilog="Exit codes: 0 every CEL validate policy in force was exported, 1 one could "
               "not be (the others are written), 2 input, policy or usage error.")
    parser.add_argument("--format", required=True, choices=("vap",),
                        help="vap: ValidatingAdmissionPolicy and its binding")
    parser.add_argument("--output", "-o", metavar="FILE",
                        help="write the YAML here instead of to stdout")
    policy_options(parser)
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    policies = load(args)
    exported = export(policies)
    objects = exported.objects
    text = yaml.safe_dump_all(objects, sort_keys=False, width=100) if objects else ""
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
