"""How an OIDC exchange fails: apart from :mod:`.transport`, so that knowing it imports no HTTP
client. ``requests`` and its dependencies (~4 MiB resident) are imported only when a first OIDC
token is fetched: a controller with no OIDC-federated policy never loads them."""

from __future__ import annotations

from rotator.providercalls import Failure


class Unusable(Exception):
    """An exchange that ended without an answer rotator will use: ``failure`` says why, for
    :func:`classify` (never with a byte of the response: it may quote the request)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.code)
        self.failure = failure


def classify(exc: Exception) -> Failure | None:
    """The :mod:`rotator.providercalls` classifier of OIDC calls: every failure of theirs is an
    :class:`Unusable`, anything else a bug that propagates."""
    return exc.failure if isinstance(exc, Unusable) else None
