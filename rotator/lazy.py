"""Provider clients built on first use, so that a cloud's SDK is imported when the first policy
that calls that cloud is reconciled, not at start-up (issue 13: boto3, azure-identity and MSAL
cost ~10 MiB and ~0.2 s of CPU per start, which a cluster that uses another cloud, or API keys
only, should not pay). :class:`rotator.oidc.TokenSource` holds its HTTP transport (``requests``,
~4 MiB) the same way, built before its first exchange.

The chain's assembly (``controllers.reconcilers.setup``) makes one :class:`Lazy` per client —
each credential source module says how to build its own (``lazy_*`` there) — and hands it to
the source, which calls :meth:`Lazy.get` only where it is about to call the provider: never in
``secret_refs``, ``calls_provider`` and the other questions the index and the reconciler ask of
every policy. Each holder has its own lock: while the first AWS policy pays boto3's import,
Azure and GCP calls go on, and the other AWS policies wait for that one build instead of each
making their own. The build runs before the provider call is fenced, so it is outside the
call's bulkhead and deadline (:mod:`rotator.providercalls`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from rotator import errors

T = TypeVar("T")


class Lazy(Generic[T]):
    """A value built by ``build`` on the first :meth:`get`, once. A build that raises leaves
    nothing built: the next :meth:`get` tries again (the reconcile that asked fails and is
    retried as any other). An SDK that cannot be imported is
    :class:`~rotator.errors.ProviderRejected` naming the missing module (``what`` says which
    SDK): a broken installation, permanent until the controller is fixed and restarted, shown
    where the user looks instead of retried as an unexpected error."""

    _value: T

    def __init__(self, build: Callable[[], T], *, what: str = "the provider's SDK") -> None:
        self._build = build
        self._what = what
        self._built = False
        self._lock = threading.Lock()

    @classmethod
    def of(cls, value: T | Lazy[T]) -> Lazy[T]:
        """``value`` itself when it is a holder, else a holder of it, already built (a client
        the caller built eagerly, or a test's fake)."""
        if isinstance(value, Lazy):
            return value
        held: Lazy[T] = cls(lambda: value)
        held._value, held._built = value, True
        return held

    @property
    def built(self) -> bool:
        return self._built

    def get(self) -> T:
        if not self._built:  # set only once _value is: read without the lock after that
            with self._lock:
                if not self._built:
                    try:
                        self._value = self._build()
                    except ImportError as exc:
                        raise errors.ProviderRejected(
                            f"{self._what} could not be imported (module "
                            f"{exc.name or 'unknown'}): this controller's installation is "
                            "incomplete",
                            code="ImportError",
                        ) from None
                    self._built = True
        return self._value
