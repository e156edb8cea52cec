"""The `quickq-guard` command line: one module per command, one per output format."""

from webhook.cli.main import main, run

__all__ = ["main", "run"]
