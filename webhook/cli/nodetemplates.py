"""`quickq-guard validate-nodetemplates`: NodeTemplates against the NodeTemplate schema.

It was called `lint`, which promised more than it does (other objects are `check`'s); that
name still runs it, with a note.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.cli.exits import EXIT_ERROR, EXIT_FAILED, EXIT_OK, error, hint, note
from webhook.manifests import read_paths

NAME = "validate-nodetemplates"
OLD_NAME = "lint"


def add_parser(commands: Any) -> None:
    for name, help_text in ((NAME, "validate NodeTemplates against the NodeTemplate schema"),
                            (OLD_NAME, f"the old name of {NAME} (deprecated)")):
        parser = commands.add_parser(
            name, help=help_text,
            description="Validate QuickQ NodeTemplates (fields, types, resource units). Input "
                        "without any NodeTemplate is an error; other objects are `check`'s.")
        parser.add_argument("paths", nargs="*", metavar="FILE", help="file, directory or -")
        parser.add_argument("--schema", action="store_true",
                            help="print the NodeTemplate JSON Schema instead")
        parser.set_defaults(command=validate if name == NAME else _old_name)


def _old_name(args: argparse.Namespace) -> int:
    note(f"`{OLD_NAME}` is deprecated: it validates NodeTemplates only; run `quickq-guard "
         f"{NAME}`")
    return validate(args)


def validate(args: argparse.Namespace) -> int:
    from webhook.engine import nodetemplate

    if args.schema:
        sys.stdout.write(nodetemplate.schema_text())
        return EXIT_OK
    if not args.paths:
        error(f"{NAME} needs a FILE, a directory or - (or --schema)")
        return EXIT_ERROR
    code, checked = EXIT_OK, 0
    for document in read_paths(args.paths):
        where = f"{document.file}:{document.line}:{document.column}" if document.line \
            else document.file
        if document.error:
            error(f"{where}: {document.error}; {hint(document.error)}")
            code = EXIT_ERROR
            continue
        obj = document.obj
        if not (isinstance(obj, dict) and obj.get("kind") == "NodeTemplate"):
            continue
        checked += 1
        metadata = obj.get("metadata")
        name = metadata.get("name", "") if isinstance(metadata, dict) else ""
        problems = nodetemplate.lint(obj)
        for problem in problems:
            print(f"{where}: NodeTemplate {name}: {problem}")
        if problems and code == EXIT_OK:
            code = EXIT_FAILED
    if not checked and code == EXIT_OK:
        error(f"no NodeTemplate found (kind: NodeTemplate); `{NAME}` checks NodeTemplates "
              "only: use `quickq-guard check` for other objects")
        return EXIT_ERROR
    print(f"{checked} NodeTemplate(s) checked" + ("" if code == EXIT_OK else ", problems found"),
          file=sys.stderr)
    return code
