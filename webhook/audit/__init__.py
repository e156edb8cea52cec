"""The background audit: what already runs in a cluster, judged as the webhook would judge it
at CREATE, written as policy reports (`quickq-guard audit`).

`scan` judges objects (pure), `state` keeps the results per object and knows which reports
changed (pure), `reports` shapes them as OpenReports or wgpolicyk8s.io reports (pure); the
edges are `cluster` (list and watch through lightkube), `lease` (one writer among replicas),
`metrics` and `controller`, which runs them together.
"""
