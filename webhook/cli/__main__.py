"""`python -m webhook.cli`: the same as the `quickq-guard` command."""

from webhook.cli.main import run

run()
