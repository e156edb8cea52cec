"""`quickq-guard export -o vap|map|native`: the policies as the API server's own
admission policies: CEL validate policies as ValidatingAdmissionPolicies
(webhook/export/vap.py), mutate policies as MutatingAdmissionPolicies
(webhook/export/map.py), `native` both, each with its binding.

Exit codes: 0 every policy in force of the format's type was exported; 1 one could not be
(the others are written, and stderr names it and says why); 2 an input, policy or usage
error.

`-o` names the format, as it does for `check` and `test`; the file is `-O`/`--output-file`.
`-o FILE` (what `-o` meant here before) still writes the file, with a deprecation note.
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
    parser.add_argument("--output", "-o", metavar="FORMAT",
                        help="vap: ValidatingAdmissionPolicy and its binding; map: "
                             "MutatingAdmissionPolicy (Kubernetes 1.36) and its binding; "
                             "native: both")
    parser.add_argument("--format", choices=FORMATS, help="the same as --output")
    parser.add_argument("--output-file", "-O", metavar="FILE",
                        help="write the YAML here instead of to stdout")
    policy_options(parser)
    parser.set_defaults(command=run)


FORMATS = ("vap", "map", "native")


def _format_and_file(args: argparse.Namespace) -> tuple[str, str | None]:
    """The format and the output file, from -o/--output, --format and -O/--output-file."""
    chosen, file = args.format, args.output_file
    if args.output in FORMATS:
        if chosen and chosen != args.output:
            raise CliError(f"two formats: --format {chosen} and -o {args.output}; give one")
        chosen = args.output
    elif args.output is not None:
        if file or not chosen:
            raise CliError(f"-o {args.output}: not a format; choose one of "
                           f"{', '.join(FORMATS)} (the file is -O/--output-file)")
        note(f"export -o FILE is deprecated: -o names the format, as in check; write "
             f"`-o {chosen} -O {args.output}`")
        file = args.output
    if not chosen:
        raise CliError(f"export needs a format: -o {'|'.join(FORMATS)}")
    return chosen, file


def run(args: argparse.Namespace) -> int:
    # The exporters are imported here: every other command starts faster without them.
    from webhook.export.forms import with_cel_forms
    from webhook.export.vap import API_VERSION

    chosen, output_file = _format_and_file(args)
    policies = with_cel_forms(load(args))
    exported = _export(policies, chosen)
    objects = exported.objects
    text = _comments(exported) + (
        yaml.safe_dump_all(objects, sort_keys=False, width=100) if objects else "")
    if output_file:
        try:
            Path(output_file).write_text(text)
        except OSError as problem:
            raise CliError(f"{output_file}: cannot write: {problem.strerror}") from None
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
