"""The PolicyExceptions `check` applies: from `--exceptions PATH` and from the manifests.

The webhook refuses a PolicyException with problems, so offline such an exception is not
applied either (with a note saying why); whether an applied one is honoured (its namespace,
its expiry) is the engine's call, as online.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime

from webhook.cli.exits import CliError
from webhook.engine.policy import PolicySet
from webhook.engine.policy_exceptions import (
    DEPRECATED_VERSIONS,
    GROUP,
    KIND,
    VERSION,
    ExceptionError,
    Exceptions,
    PolicyException,
    index,
    is_exception,
    problems,
    read_exception,
    unheard,
)
from webhook.manifests import Document, Source, manifest_sources, read_source

_DEPRECATED = frozenset(f"{GROUP}/{version}" for version in DEPRECATED_VERSIONS)


def load(files: Sequence[str], manifests: Sequence[Source], read: Mapping[str, bytes],
         policies: PolicySet, now: datetime, notes: list[str]) -> Exceptions:
    """The exceptions of `files` (every object in them must be one) and those among the
    sources of the manifests (judged there too, as the webhook judges them), as of `now`.
    `read`: the bytes the scan read already, by source name (`-` is stdin)."""
    found: list[PolicyException] = []
    for document in _documents(manifest_sources(files), read):
        where = f"--exceptions {document.source}"
        if document.error:
            raise CliError(f"{where}: {document.error}")
        if not is_exception(document.obj):
            raise CliError(f"{where}: not a {KIND} (apiVersion {GROUP}/{VERSION}, kind "
                           f"{KIND}); pass only exceptions to --exceptions")
        if document.obj.get("apiVersion") in _DEPRECATED:
            notes.append(f"{where}: apiVersion {document.obj['apiVersion']} is deprecated; "
                         f"write {GROUP}/{VERSION}")
        try:
            found.append(read_exception(document.obj))
        except ExceptionError as error:
            raise CliError(f"{where}: {error}") from None
    for source in manifests:  # judge.scan found the kind's name in these
        for document in read_source(source, read.get(source.name)):
            if not document.error and is_exception(document.obj):
                try:
                    found.append(read_exception(document.obj))
                except ExceptionError:
                    continue  # judged with the manifests: its denial says what is wrong
    applied = []
    for exception in found:
        refused = problems(exception, policies, now)
        if refused:
            notes.append(f"not applying {KIND} {exception.key}: the webhook refuses it: "
                         + "; ".join(refused))
            continue
        ignored = unheard(exception, policies.config)
        if ignored:
            notes.append(ignored)
            continue
        applied.append(exception)
    return index(applied)


def _documents(sources: list[Source], read: Mapping[str, bytes]) -> Iterator[Document]:
    """The documents of the --exceptions sources."""
    for source in sources:
        if not source.exists:
            raise CliError(f"--exceptions {source.name}: no such file or directory")
        yield from read_source(source, read.get(source.name))
