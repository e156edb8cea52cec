"""`quickq-guard crd`: the CustomResourceDefinitions quickq-guard reads, for `kubectl apply`.

The same schemas the chart ships (webhook/export/crd.py makes both from the engine's models), for
clusters that install quickq-guard without the chart or the CRDs apart from it.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from webhook.cli.exits import EXIT_OK
from webhook.engine.policy_exceptions import DEPRECATED_VERSIONS, KIND, VERSION

KINDS = ("policyexception", "nodetemplate")


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "crd", help="print the CustomResourceDefinitions (PolicyException, NodeTemplate)",
        description="Print the CustomResourceDefinitions of quickq.io as YAML for kubectl "
                    "apply -f -: PolicyException (exceptions to policies, with an expiry) and "
                    "NodeTemplate. Their schemas make the API server refuse malformed "
                    "objects before the webhook is asked.")
    parser.add_argument("--kind", choices=KINDS, action="append",
                        help="only this CRD (repeatable; default: both)")
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    from webhook.export import crd  # here: every other command starts faster without it

    wanted = args.kind or list(KINDS)
    documents = []
    if "policyexception" in wanted:
        documents.append(crd.definition(KIND, VERSION, crd.exception_schema(),
                                        DEPRECATED_VERSIONS))
    if "nodetemplate" in wanted:
        documents.append(crd.definition("NodeTemplate", "v1", crd.openapi_v3_schema()))
    print(yaml.safe_dump_all(documents, sort_keys=False, width=100), end="")
    return EXIT_OK
