"""`quickq-guard check`: judge manifests offline with the engine the webhook runs."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from webhook.cli import exceptions, judge
from webhook.cli.exits import EXIT_ERROR, CliError, error, note
from webhook.cli.formats import NAMES, Options, format_named
from webhook.cli.summary import FAIL_ON, exit_code
from webhook.engine.policy import PolicySet
from webhook.loader import load_config, load_policies


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "check", help="judge manifests offline, as the webhook would at kubectl apply",
        description="Judge YAML/JSON manifests (files, directories, or - for stdin) with the "
                    "same engine the webhook runs. A directory is walked the way a checkout "
                    "sees it: hidden folders and what .gitignore ignores are left out, and "
                    "files with no Kubernetes object are skipped with a note.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="file, directory or -")
    policy_options(parser)
    parser.add_argument("--output", "-o", choices=NAMES, default="table",
                        help="table (default; colour on a terminal unless NO_COLOR is set), "
                             "json (the JSON contract), sarif (SARIF 2.1.0, for code "
                             "scanning), junit (JUnit XML), github (workflow commands that "
                             "annotate a pull request), policyreport (wgpolicyk8s.io "
                             "PolicyReports), html (one self-contained page for people: "
                             "summary, charts, a table of findings to filter and sort)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="failures only: show only what fails the run (see --fail-on) "
                             "and errors, and no notes on skipped files")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="deny",
                        help="what makes the exit code 1: deny (default: an enforced policy "
                             "denies), warn (also warnings and dry-run denials), audit (also "
                             "audit findings)")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="leave out files and folders in directory walks; .gitignore "
                             "syntax, relative to the directory (repeatable: --exclude "
                             "legacy/ --exclude '*.tmpl.yaml')")
    parser.add_argument("--allow-empty", action="store_true",
                        help="exit 0 when the input holds no Kubernetes object (by default "
                             "that is an error: a failed `helm template` upstream, say)")
    parser.add_argument("--fix", action="store_true",
                        help="print the manifests with the mutate policies' patches applied, "
                             "comments and formatting kept; what cannot be fixed is reported "
                             "on stderr")
    parser.add_argument("--in-place", action="store_true",
                        help="with --fix: write each file back (atomically) instead of "
                             "printing")
    parser.add_argument("--exceptions", action="append", default=[], metavar="PATH",
                        help="PolicyExceptions to apply (a file or directory of them; "
                             "repeatable), besides those among the manifests; honoured as "
                             "the webhook honours them: from the config's "
                             "exceptionNamespaces, until they expire")
    parser.add_argument("--at", type=moment, metavar="TIME",
                        help="judge as of this time (RFC 3339 with an offset: "
                             "2027-01-15T00:00:00Z), not now: which PolicyExceptions will "
                             "still apply on a release day")
    parser.add_argument("--jobs", "-j", default=0, metavar="N",
                        type=count_of("must be 1 or more (leave it out: one per CPU)"),
                        help="processes to judge with, 1 or more (default: one per CPU when "
                             "the input is over 1 MB, else 1)")
    parser.set_defaults(command=check)


def policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", metavar="DIR",
                        help="directory of policy files (default: the shipped policies)")
    parser.add_argument("--config", metavar="FILE",
                        help="global config: mode, exclusions, per-policy overrides "
                             "(default: none)")


def count_of(too_few: str) -> Callable[[str], int]:
    """An argparse type: a whole number of at least 1; `too_few` says what to do instead."""
    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(too_few)
        return value
    return count


def moment(text: str) -> datetime:
    """An argparse type: a time with its offset (a time without one means no one instant)."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an RFC 3339 time such as 2027-01-15T00:00:00Z, got {text!r}") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no offset: add Z or +01:00")
    return value


def load(args: argparse.Namespace) -> PolicySet:
    return load_policies(args.policies, load_config(args.config))


def check(args: argparse.Namespace) -> int:
    if args.in_place and not args.fix:
        raise CliError("--in-place writes what --fix makes: pass --fix --in-place")
    if args.fix:
        if args.output != "table":
            raise CliError("--fix prints YAML manifests, not a report: leave out --output "
                           "(run check -o FORMAT separately for a report)")
        from webhook.cli import fix

        return fix.fix(args, load(args))
    policies = load(args)
    stdin = sys.stdin.buffer.read() if "-" in args.paths else None
    out = sys.stdout
    color = args.output == "table" and out.isatty() and "NO_COLOR" not in os.environ
    options = Options(color=color, quiet=args.quiet, fail_on=args.fail_on)
    writer = format_named(args.output)(out, options)
    found = judge.scan(args.paths, args.exclude, stdin)
    now = args.at or datetime.now(UTC)  # the one time the whole run judges at
    notes: list[str] = []
    granted = judge.Granted(exceptions.load(args.exceptions, found.exceptions, found.read,
                                            policies, now, notes), now)
    if not args.quiet:
        for line in notes:
            note(line)
    claims = judge.input_claims([found.claims], found.read)
    counts: Counter[str] = Counter()
    writer.start(policies)
    for part in judge.judge_all(found.tasks, policies, writer.render, args.jobs, found.read,
                                  granted, claims, found.size):
        for line in part.errors:
            error(line)
        if not args.quiet:
            for line in part.notes:
                note(line)
        writer.write(part.rendered)
        counts.update(part.counts)
    writer.finish(counts)
    out.flush()
    if not counts["resources"] and not args.allow_empty:
        where = ", ".join("stdin" if p == "-" else p for p in args.paths)
        error(f"no Kubernetes object found in {where}; if the input comes from a command "
              "(helm template, kustomize build), check that it succeeded; pass --allow-empty "
              "if no object is expected")
        return EXIT_ERROR
    return exit_code(counts, args.fail_on)
