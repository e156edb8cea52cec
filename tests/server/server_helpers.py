"""The server tests' names for the shared builders and server runner in webhook.testing."""

from webhook.testing import (
    NAMESPACE,
    REPO,
    SERVICE,
    SERVICE_DNS,
    Server,
    bad_pod,
    client_cert,
    file_serial,
    free_port,
    metric,
    post,
    with_probe,
)
from webhook.testing import admission_review as review
from webhook.testing import review_pod as pod

__all__ = ["NAMESPACE", "REPO", "SERVICE", "SERVICE_DNS", "Server", "bad_pod", "client_cert",
           "file_serial", "free_port", "metric", "pod", "post", "review", "with_probe"]
