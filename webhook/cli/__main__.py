"""`python -m webhook.cli`: the same as the `quickq-guard` command."""

import sys

from webhook.cli.main import main

sys.exit(main())
