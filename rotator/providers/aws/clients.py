"""boto3 clients with timeouts, and calls to them fenced by :mod:`rotator.providercalls` (bulkhead,
deadline, one observation) with botocore's errors classified here (:func:`classify`).

Endpoints follow boto3's own configuration: ``AWS_ENDPOINT_URL_STS`` / ``AWS_ENDPOINT_URL_IAM``
(or ``AWS_ENDPOINT_URL``) point rotator at private endpoints or, in tests, at moto.

This module (and :mod:`~rotator.providers.aws.identity`) imports boto3 and botocore: the
controller builds its :class:`Clients` when the first AWS policy calls AWS, never at start-up
(``controllers.reconcilers.credentialsources.aws.lazy_clients``); the other AWS modules name
:class:`Clients` for type checking only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
import botocore.config
import botocore.exceptions
from botocore import UNSIGNED

from rotator import providercalls
from rotator.observe import Observer
from rotator.providercalls import Classifier, Failure, ProviderCalls

T = TypeVar("T")

# Throttling, server-side trouble and not-yet-consistent identities are worth retrying; anything
# else (access denied, invalid role or token, malformed input) fails the same way next time.
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "IDPCommunicationError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)

_CONFIG = botocore.config.Config(
    connect_timeout=5,
    read_timeout=10,
    retries={"total_max_attempts": 2, "mode": "standard"},
)


class Clients:
    """Thread-safe cache of boto3 clients (creating one costs ~50 ms; a client is reusable)."""

    def __init__(
        self,
        observer: Observer,
        *,
        concurrency: int = 4,
        deadline: float = providercalls.DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.observer = observer
        self._concurrency = concurrency
        self._deadline = deadline
        self._monotonic = monotonic
        self._calls: dict[str, ProviderCalls] = {}
        self._lock = threading.Lock()
        self._session = boto3.session.Session()
        self._clients: dict[tuple[str, str, str], Any] = {}

    def unsigned_sts(self, region: str) -> Any:
        """STS for AssumeRoleWithWebIdentity, which is not signed (the token is the proof)."""
        key = ("sts", region, "unsigned")
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self._session.client(
                    "sts",
                    region_name=region,
                    config=_CONFIG.merge(botocore.config.Config(signature_version=UNSIGNED)),
                )
            return self._clients[key]

    def signed(
        self,
        service: str,
        region: str,
        access_key_id: str,
        secret_access_key: str,
        session_token: str | None = None,
    ) -> Any:
        """A client signing with the given keys (not cached: keys rotate)."""
        with self._lock:
            return self._session.client(
                service,
                region_name=region,
                aws_access_key_id=access_key_id,
                aws_secret_access_key=secret_access_key,
                aws_session_token=session_token,
                config=_CONFIG,
            )

    def run(
        self,
        provider: str,
        call: str,
        fn: Callable[[], T],
        *,
        abandon: bool = True,
        classifier: Classifier | None = None,
    ) -> T:
        """``fn()`` (a call of a client of ``provider``: ``aws-sts``, ``aws-iam``, or botocore's
        default chain, ``aws-identity``) fenced by the provider's bulkhead and deadline
        (:meth:`ProviderCalls.run`, ``abandon`` included). ``classifier`` replaces
        :func:`classify` for a provider whose calls raise more than botocore's client errors;
        the first call of a provider fixes it."""
        with self._lock:
            calls = self._calls.get(provider)
            if calls is None:
                calls = self._calls[provider] = ProviderCalls(
                    provider,
                    observer=self.observer,
                    classify=classifier or classify,
                    concurrency=self._concurrency,
                    deadline=self._deadline,
                    monotonic=self._monotonic,
                )
        return calls.run(call, fn, abandon=abandon)


def classify(exc: Exception) -> Failure | None:
    """A botocore error's code (the provider's, else the exception's type name): throttling,
    5xx, 429 and :data:`TRANSIENT_CODES` are transient; any other answer is a refusal; no
    answer (connection failure, timeout) is transient."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        return Failure(code, code in TRANSIENT_CODES or status >= 500 or status == 429)
    if isinstance(exc, botocore.exceptions.BotoCoreError | OSError):
        return Failure(type(exc).__name__, transient=True)
    return None
