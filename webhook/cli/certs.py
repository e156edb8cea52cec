"""`quickq-guard certs`: a CA and a serving certificate for the webhook."""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.check import count_of


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "certs", help="create a CA and a serving certificate",
        description="Write ca.crt, ca.key, tls.crt and tls.key for the webhook's Service and "
                    "print the base64 caBundle. Run again to renew: the CA is reused.")
    parser.add_argument("--service", default="quickq-guard",
                        help="the webhook's Service name (default: %(default)s)")
    parser.add_argument("--namespace", default="quickq-guard",
                        help="the Service's namespace (default: %(default)s)")
    parser.add_argument("--out", default="certs", metavar="DIR",
                        help="where the files go (default: %(default)s)")
    parser.add_argument("--days", type=count_of("must be at least 1"), default=365,
                        help="validity of the serving certificate (default: %(default)s)")
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    from webhook.server import certs

    return int(certs.run(args))
