"""`quickq-guard test DIR`: policy test suites, run offline through the engine the webhook runs.

A test file (`kind: PolicyTest`, see docs/testing-policies.md and webhook.cli.suite) names
policies, the resources to judge, and per resource and policy the expected result; for a
mutation, the expected patched resource.
"""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.check import policy_options

OUTPUTS = ("table", "json", "junit", "github")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "test", help="run policy test suites (kind: PolicyTest files)",
        description="Run the PolicyTest files under each PATH (directories are walked; other "
                    "YAML is ignored): judge their resources with the named policies and "
                    "compare each result, and each patched resource, with the expected one. "
                    "Exit 0 when every case passes, 1 when one fails, 2 on a test file error.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="test file or directory")
    policy_options(parser)
    parser.add_argument("--output", "-o", choices=OUTPUTS, default="table",
                        help="table (default), json, junit (a test case per case) or github "
                             "(an annotation per failed case)")
    parser.add_argument("--quiet", "-q", action="store_true", help="show failed cases only")
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    from webhook.cli import suite  # its pydantic models: only when tests run

    return suite.run(args)
