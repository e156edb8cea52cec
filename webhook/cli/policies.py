"""`quickq-guard policies`: list the loaded policies, as a table or as JSON for tools."""

from __future__ import annotations

import argparse
import json
from typing import Any

from webhook.cli.check import load, policy_options
from webhook.cli.exits import EXIT_OK
from webhook.engine.policy import Policy


def add_parser(commands: Any) -> None:
    parser = commands.add_parser("policies", help="list the loaded policies",
                                 description="List the policies with type and action.")
    policy_options(parser)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="table (default), or json: each policy's id, type, action, "
                             "description, match, params and source file")
    parser.set_defaults(command=list_policies)


def list_policies(args: argparse.Namespace) -> int:
    policies = load(args)
    if args.output == "json":
        listed = {"mode": policies.config.mode,
                  "policies": [described(policy) for policy in policies.policies]}
        print(json.dumps(listed, indent=2))
        return EXIT_OK
    print(f"{'ID':<28}{'TYPE':<10}{'ACTION':<9}DESCRIPTION   (mode: {policies.config.mode})")
    for policy in policies.policies:
        print(f"{policy.id:<28}{policy.type:<10}{policy.action:<9}{policy.description}")
    return EXIT_OK


def described(policy: Policy) -> dict[str, Any]:
    """A policy as `policies -o json` lists it: what it is, its `match` and its parameters
    (after the config's overrides), and the file it was loaded from."""
    return {"id": policy.id, "type": policy.type, "action": policy.action,
            "description": policy.description, "match": policy.match.model_dump(mode="json"),
            "params": policy.params.model_dump(mode="json"), "source": policy.source}
