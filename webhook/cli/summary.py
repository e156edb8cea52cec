"""What a run comes to: the summary every format ends with, and the exit code.

Both read the engine's `Decision.outcome` (counted in webhook.cli.judge.count); nothing here
works a verdict out again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from webhook.cli.exits import EXIT_ERROR, EXIT_FAILED, EXIT_OK
from webhook.engine.results import OUTCOMES

STATUSES = ("pass", "fail", "warn", "patch", "skip", "error")
# --fail-on: what makes the exit code 1, from the strictest default up.
FAIL_ON = ("deny", "warn", "audit")


def summary(counts: Counter[str]) -> dict[str, Any]:
    """The JSON contract's summary: results per status (as before; a result whose findings a
    PolicyException all covers is `excepted`, not `fail`, and one whose findings are all an
    audit policy's is `audit`, not `warn`), then what it adds: the decisions
    per outcome and the number of findings (one per thing to change)."""
    return {"resources": counts["resources"], **{key: counts[key] for key in STATUSES},
            "audit": counts["audit"], "excepted": counts["excepted"],
            "outcomes": {outcome: counts["outcome:" + outcome] for outcome in OUTCOMES},
            "skipped": counts["skipped"], "findings": counts["findings"]}


def summary_line(counts: Counter[str]) -> str:
    """`3 resources: 1 denied, 1 allowed, 1 error, 2 skipped; 4 findings (...)` for people:
    a skipped object (a kind not judged, an excluded namespace) is not counted allowed."""
    outcomes = [f"{counts['outcome:' + o]} {o}" for o in OUTCOMES
                if counts["outcome:" + o] or o in ("denied", "allowed", "error")]
    if counts["skipped"]:
        outcomes.append(f"{counts['skipped']} skipped")
    results = ", ".join(f"{counts[key]} {key}" for key in STATUSES
                        + (("audit",) if counts["audit"] else ())
                        + (("excepted",) if counts["excepted"] else ()))
    return (f"{counts['resources']} resources: {', '.join(outcomes)}; "
            f"{counts['findings']} findings; policy results: {results}\n")


def exit_code(counts: Counter[str], fail_on: str = "deny") -> int:
    if counts["outcome:error"]:
        return EXIT_ERROR
    failed = counts["outcome:denied"]
    if fail_on in ("warn", "audit"):
        failed += counts["level:warn"] + counts["outcome:would-deny"]
    if fail_on == "audit":
        failed += counts["level:audit"]
    return EXIT_FAILED if failed else EXIT_OK
