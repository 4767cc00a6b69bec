"""What the OIDC client remembers: tokens per client until shortly before they expire, token
endpoints per issuer for an hour, and failures of either for a backoff — all in
:class:`rotator.expiring.ExpiringCache` (the cache the metrics endpoint's verdicts use too), with
its misses translated here into the engine's errors, each with its code.

When a token must be fetched, one caller fetches while the others for the same client wait for
that result (kopf's credential Vault shape): a burst of policies sharing a client makes one
request, not fifty; discovery is single-flight per issuer the same way. A failed fetch is
remembered for 5 s, doubling while it keeps failing, at most 1 min, so the callers queued behind
it fail at once instead of re-fetching one after another; while a retry of a failing key is in
flight, other callers fail at once rather than wait for it. Both caches are bounded (keys are
every tenant's issuers and clients): the least recently used entry goes first.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from rotator import errors
from rotator.expiring import (
    ExpiringCache,
    FailureBackoff,
    StillFailing,
    WaitTimedOut,
    translated,
)
from rotator.providercalls import DEADLINE_EXCEEDED

FAILURE_BACKOFF = 5.0
"""Seconds a failed discovery or token fetch is remembered; doubles per repeated failure."""
FAILURE_BACKOFF_CAP = 60.0
MAX_CLIENTS = 4096
"""Tokens kept (one per client); a token is fetched once per credential lifetime anyway."""
MAX_ISSUERS = 1024
"""Token endpoints kept (one per issuer)."""

V = TypeVar("V")


class Remembered(Generic[V]):
    """Values per key, each fetched once at a time, failures remembered (see the module
    docstring); every miss raised as a :class:`~rotator.errors.CredentialError` with a code."""

    def __init__(
        self,
        max_entries: int,
        *,
        backoff: float,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
    ) -> None:
        self._clock = clock
        self._cache: ExpiringCache[tuple[str, ...], V] = ExpiringCache(
            max_entries,
            monotonic=monotonic,
            failures=FailureBackoff(
                first=backoff, cap=FAILURE_BACKOFF_CAP, remember=(errors.CredentialError,)
            ),
        )

    def get(
        self,
        key: tuple[str, ...],
        fetch: Callable[[], tuple[V, float]],
        *,
        wait: float,
        what: str,
    ) -> V:
        """The value of ``key`` or ``fetch()``'s (value, seconds it stays fresh), waiting for
        another caller's fetch at most ``wait`` seconds."""
        try:
            return self._cache.get_or_load(key, fetch, wait=max(0.0, wait))
        except StillFailing as still:
            raise self._remembered(still) from None
        except WaitTimedOut:
            raise errors.ProviderUnavailable(
                f"{what} did not arrive in time: another request for it has been in flight "
                "for the whole deadline (the issuer is slow)",
                code=DEADLINE_EXCEEDED,
            ) from None

    def _remembered(self, still: StillFailing) -> errors.CredentialError:
        """The remembered failure with a note of when it is retried; the note is the caller's
        only: a token cache whose fetch fails with this error remembers ``still.error``, the
        failure as first raised (:func:`~rotator.expiring.translated`), so notes never pile up
        however many clients share a failing issuer."""
        error = still.error
        if still.retrying:
            note = "a retry is in flight"
        else:
            note = f"not retried before {_hms(self._clock() + still.retry_in)}"
        kind = type(error) if isinstance(error, errors.CredentialError) else errors.CredentialError
        return translated(kind(f"{error}; {note}", code=getattr(error, "code", None)), still)


def _hms(t: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(t))
