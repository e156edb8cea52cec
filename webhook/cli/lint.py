"""`quickq-guard lint`: NodeTemplates against the NodeTemplate schema."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from webhook.cli.exits import EXIT_ERROR, EXIT_FAILED, EXIT_OK, error, hint
from webhook.manifests import read_paths


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "lint", help="validate NodeTemplates against the NodeTemplate schema",
        description="Validate QuickQ NodeTemplates (fields, types, resource units). Input "
                    "without any NodeTemplate is an error.")
    parser.add_argument("paths", nargs="*", metavar="FILE", help="file, directory or -")
    parser.add_argument("--schema", action="store_true",
                        help="print the NodeTemplate JSON Schema instead")
    parser.set_defaults(command=lint)


def lint(args: argparse.Namespace) -> int:
    from webhook.engine import nodetemplate

    if args.schema:
        sys.stdout.write(nodetemplate.schema_text())
        return EXIT_OK
    if not args.paths:
        error("lint needs a FILE, a directory or - (or --schema)")
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
        error("no NodeTemplate found (kind: NodeTemplate); `lint` checks NodeTemplates only: "
              "use `quickq-guard check` for other objects")
        return EXIT_ERROR
    print(f"{checked} NodeTemplate(s) checked" + ("" if code == EXIT_OK else ", problems found"),
          file=sys.stderr)
    return code
