"""The audit's current results as the HTML page `check -o html` writes: what the controller
serves at /report on its metrics port (--serve-report).

The page is made from the reports the controller would write now (webhook.audit.reports,
each namespace's cut at --max-results, so the page is bounded as the reports are), read back
as `quickq-guard report` reads those in the cluster (webhook.cli.report.verdicts): /report,
`quickq-guard report -o html` and the reports themselves show the same results, with the
same values hidden. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from webhook.audit import reports
from webhook.audit.state import Held
from webhook.cli.report import html_page
from webhook.engine.policy import PolicySet

MADE_BY = "quickq-guard audit (/report)"


def page(api: reports.ReportApi, held: Mapping[str, Sequence[Held]], policies: PolicySet,
         max_results: int = reports.MAX_RESULTS) -> str:
    """The page of the results held by namespace ("" for cluster scope), in the order
    `quickq-guard report` reads reports: the namespaces' by name, then the cluster's."""
    order = sorted(held, key=lambda namespace: (not namespace, namespace))
    bodies = [reports.report(api, namespace, held[namespace], max_results)
              for namespace in order if held[namespace]]
    return html_page(bodies, policies, MADE_BY)
