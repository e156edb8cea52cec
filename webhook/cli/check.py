"""`quickq-guard check`: judge manifests offline with the engine the webhook runs."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from webhook.cli import exception_files, judge
from webhook.cli.exits import EXIT_ERROR, CliError, error, note
from webhook.cli.formats import NAMES, Format, Options, format_named
from webhook.cli.summary import FAIL_ON, exit_code
from webhook.engine.policy import PolicySet
from webhook.engine.review import Review
from webhook.loader import find_config, load_config, load_policies, load_policy_dirs


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "check", help="judge manifests offline, as the webhook would at kubectl apply",
        description="Judge YAML/JSON manifests (files, directories, or - for stdin) with the "
                    "same engine the webhook runs. A directory is walked the way a checkout "
                    "sees it: hidden folders and what .gitignore ignores are left out, and "
                    "vendor/ and node_modules/ are left out unless named, and files with no "
                    "Kubernetes object are skipped (--verbose lists them).")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="file, directory or -")
    parser.add_argument("--policies", action="append", default=[], metavar="PATH",
                        help="a directory of your policy files, or one policy file, run "
                             "beside the shipped ones (repeatable; a policy with a shipped "
                             "policy's id replaces it)")
    parser.add_argument("--no-default-policies", action="store_true",
                        help="run only the policies of --policies, not the shipped ones")
    parser.add_argument("--policy", action="append", default=[], metavar="ID",
                        help="run only this policy (repeatable)")
    parser.add_argument("--skip-policy", action="append", default=[], metavar="ID",
                        help="leave this policy out (repeatable)")
    parser.add_argument("--config", metavar="FILE",
                        help="global config: mode, exclusions, per-policy overrides "
                             "(default: .quickq-guard.yaml in the working directory or the "
                             "nearest parent up to the repository's root, else none)")
    parser.add_argument("--mode", choices=("enforce", "dry-run"),
                        help="override the config's mode, as serve --mode does: dry-run "
                             "reports denials as would-deny")
    parser.add_argument("--output", "-o", action=OutputAction, default="table",
                        metavar="FORMAT[=FILE]",
                        help="repeatable, one report per -o (-o table -o sarif=results.sarif); "
                             "FORMAT=FILE writes that report to FILE, the others go to "
                             "stdout (only one may) or --output-file. Formats: "
                             "table (default; colour on a terminal unless NO_COLOR is set), "
                             "json (the JSON contract), sarif (SARIF 2.1.0, for code "
                             "scanning), junit (JUnit XML), github (workflow commands that "
                             "annotate a pull request), gitlab (GitLab code quality: Code "
                             "Climate JSON), policyreport (wgpolicyk8s.io "
                             "PolicyReports), html (one self-contained page for people: "
                             "summary, charts, a table of findings to filter and sort)")
    parser.add_argument("--output-file", metavar="FILE",
                        help="write the report (the -o given without =FILE) to FILE, not "
                             "stdout")
    parser.add_argument("--docs-url", default="", metavar="URL",
                        help="where this project's docs site is served: SARIF rules then "
                             "link each policy to its section (URL/policies/#ID)")
    parser.add_argument("--quiet", "-q", action="store_true",
                        help="failures only: show only what fails the run (see --fail-on) "
                             "and errors, and no notes on skipped files")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="also list each file a directory walk skipped (no Kubernetes "
                             "object, a kustomization or patch, an unrendered template), and "
                             "why; without it they are counted in one note")
    parser.add_argument("--show-skipped", action="store_true",
                        help="table: a SKIP line for each object not judged (a kind "
                             "quickq-guard does not judge, an excluded namespace), saying why; "
                             "without it they are counted in the summary only")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="deny",
                        help="what makes the exit code 1: deny (default: an enforced policy "
                             "denies), warn (also warnings and dry-run denials), audit (also "
                             "audit findings)")
    parser.add_argument("--exclude", action="append", default=[], metavar="GLOB",
                        help="leave out files and folders; .gitignore syntax, relative to the "
                             "directory walked, or for a file named, to the working directory "
                             "(repeatable: --exclude legacy/ --exclude '*.tmpl.yaml')")
    parser.add_argument("--skip-non-manifests", action="store_true",
                        help="a file named on the command line that holds no Kubernetes "
                             "object (a workflow, a values file) is skipped with a note, as "
                             "in a directory walk, instead of being an error: for pre-commit, "
                             "which names every YAML and JSON file it sees")
    parser.add_argument("--strict", action="store_true",
                        help="a kind that is neither judged nor one Kubernetes serves (a "
                             "custom resource not in the config's customKinds) is an error, "
                             "not a skip")
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


def skipped_note(files: int, kustomizations: int) -> str:
    """The one note, without --verbose, on the files a directory walk skipped."""
    built = (f" ({kustomizations} kustomization{'s' * (kustomizations != 1)}: check what "
             "each builds with kustomize build DIR | quickq-guard check -)"
             if kustomizations else "")
    return (f"skipped {files} file{'s' * (files != 1)} with no Kubernetes object to judge"
            f"{built}; --verbose lists them")


def policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", metavar="PATH",
                        help="directory of policy files, or one policy file (default: the "
                             "shipped policies)")
    parser.add_argument("--config", metavar="FILE",
                        help="global config: mode, exclusions, per-policy overrides "
                             "(default: none)")


class OutputAction(argparse.Action):
    """`-o FORMAT` or `-o FORMAT=FILE`, repeatable: `outputs` collects (format, file or None)
    in order; `output` keeps the first format's name."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option: str | None = None) -> None:
        name, _, file = str(values).partition("=")
        if name not in NAMES:
            parser.error(f"argument --output/-o: invalid choice: {name!r} (choose from "
                         f"{', '.join(NAMES)})")
        if "=" in str(values) and not file:
            parser.error(f"argument --output/-o: {values!r} names no file after =")
        outputs = [*(getattr(namespace, "outputs", None) or []), (name, file or None)]
        namespace.outputs = outputs
        namespace.output = outputs[0][0]


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


def port_number(lowest: int) -> Callable[[str], int]:
    """An argparse type: a TCP port, `lowest` (0 where it means none) to 65535."""
    def port(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
        if not lowest <= value <= 65535:
            raise argparse.ArgumentTypeError(f"a port is {lowest} to 65535, not {value}")
        return value
    return port


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


def check_policies(args: argparse.Namespace) -> PolicySet:
    """The policies a check runs. Flags win over the config file, which wins over the
    defaults: --policy/--skip-policy and --mode over the config's `policies` and `mode`."""
    config_file = args.config
    if config_file is None and (config_file := find_config()) is not None and not args.quiet:
        note(f"config: {config_file}")
    config = load_config(config_file)
    if args.mode:
        config = config.model_copy(update={"mode": args.mode})
    return load_policy_dirs(args.policies, config, not args.no_default_policies,
                            tuple(args.policy), tuple(args.skip_policy))


def check(args: argparse.Namespace) -> int:
    if args.in_place and not args.fix:
        raise CliError("--in-place writes what --fix makes: pass --fix --in-place")
    if args.fix:
        if report_outputs(args) != [("table", None)]:
            raise CliError("--fix prints YAML manifests, not a report: leave out --output "
                           "(run check -o FORMAT separately for a report)")
        from webhook.cli import fix

        return fix.fix(args, check_policies(args))
    stdin = sys.stdin.buffer.read() if "-" in args.paths else None
    found = judge.scan(args.paths, args.exclude, stdin, args.skip_non_manifests)
    if judge.workers_for(found.tasks, args.jobs, found.size) > 1:
        policies = judge.load_for_workers(lambda: check_policies(args))
    else:
        policies = check_policies(args)
    with contextlib.ExitStack() as files:
        writers = [output_writer(name, file, args, files)
                   for name, file in report_outputs(args)]
        return _check(args, policies, found, writers)


def report_outputs(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """Each report asked for: its format and the file it goes to (None: stdout)."""
    outputs: list[tuple[str, str | None]] = getattr(args, "outputs", None) or [("table", None)]
    if args.output_file:
        outputs = [(name, file or args.output_file) for name, file in outputs]
    if sum(file is None for _, file in outputs) > 1:
        raise CliError("more than one report would go to stdout: give each -o but one a file "
                       "(-o table -o sarif=results.sarif)")
    return outputs


def output_writer(name: str, file: str | None, args: argparse.Namespace,
                  files: contextlib.ExitStack) -> Format:
    if file is None:
        out: TextIO = sys.stdout
    else:
        try:
            out = files.enter_context(open(file, "w", encoding="utf-8"))  # noqa: SIM115
        except OSError as problem:
            raise CliError(f"cannot write {file}: {problem.strerror or problem}") from None
    color = name == "table" and file is None and out.isatty() and "NO_COLOR" not in os.environ
    options = Options(color=color, quiet=args.quiet, fail_on=args.fail_on,
                      docs_url=args.docs_url, show_skipped=args.show_skipped)
    return format_named(name)(out, options)


def _check(args: argparse.Namespace, policies: PolicySet, found: judge.Input,
           writers: list[Format]) -> int:
    def render(judged: Sequence[judge.Judged]) -> tuple[Any, ...]:
        return tuple(writer.render(judged) for writer in writers)

    now = args.at or datetime.now(UTC)  # the one time the whole run judges at
    notes: list[str] = []
    exceptions = exception_files.load(args.exceptions, found.exceptions, found.read, policies,
                                      now, notes)
    if not args.quiet:
        for line in notes:
            note(line)
    review = Review(exceptions=exceptions, claims=judge.input_claims([found.claims], found.read),
                    train_jobs=judge.input_train_jobs([found.train_jobs], found.read), now=now)
    counts: Counter[str] = Counter()
    skipped_files = kustomizations = 0
    for writer in writers:
        writer.start(policies)
    for part in judge.judge_all(found.tasks, policies, render, args.jobs, found.read,
                                  review, found.size, args.strict):
        for line in part.errors:
            error(line)
        if args.verbose and not args.quiet:
            for line in part.notes:
                note(line)
        skipped_files += len(part.notes)
        kustomizations += part.kustomizations
        for writer, rendered in zip(writers, part.rendered, strict=True):
            writer.write(rendered)
        counts.update(part.counts)
    for writer in writers:
        writer.finish(counts)
        writer.out.flush()
    shows_table = any(name == "table" and file is None for name, file in report_outputs(args))
    if counts["skipped"] and shows_table and not args.show_skipped and not args.quiet:
        note(f"{counts['skipped']} object{'s' * (counts['skipped'] != 1)} not judged (a kind "
             "quickq-guard does not judge, an excluded namespace): --show-skipped lists them")
    if skipped_files and not args.verbose and not args.quiet:
        note(skipped_note(skipped_files, kustomizations))
    if not counts["resources"] and not args.allow_empty:
        where = ", ".join("stdin" if p == "-" else p for p in args.paths)
        error(f"no Kubernetes object found in {where}; if the input comes from a command "
              "(helm template, kustomize build), check that it succeeded; pass --allow-empty "
              "if no object is expected")
        return EXIT_ERROR
    return exit_code(counts, args.fail_on)
