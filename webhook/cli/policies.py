"""`quickq-guard policies`: list the loaded policies."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.check import load, policy_options
from webhook.cli.exits import EXIT_OK


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("policies", help="list the loaded policies",
                                 description="List the policies with type and action.")
    policy_options(parser)
    parser.set_defaults(command=list_policies)


def list_policies(args: argparse.Namespace) -> int:
    policies = load(args)
    print(f"{'ID':<28}{'TYPE':<10}{'ACTION':<9}DESCRIPTION   (mode: {policies.config.mode})")
    for policy in policies.policies:
        print(f"{policy.id:<28}{policy.type:<10}{policy.action:<9}{policy.description}")
    return EXIT_OK
