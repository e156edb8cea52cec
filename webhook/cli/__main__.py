"""`python -m webhook.cli`: the same as the `quickq-guard` command."""

import sys

from webhook.cli.commands import main

sys.exit(main())
