"""The `quickq-guard` command line."""

from webhook.cli.commands import main

__all__ = ["main"]
