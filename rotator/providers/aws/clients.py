"""boto3 clients with timeouts, and botocore errors mapped once into the engine's error tree.

Endpoints follow boto3's own configuration: ``AWS_ENDPOINT_URL_STS`` / ``AWS_ENDPOINT_URL_IAM``
(or ``AWS_ENDPOINT_URL``) point rotator at private endpoints or, in tests, at moto.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
from botocore import UNSIGNED

from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.observe import Observer

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

    def __init__(self, observer: Observer, *, concurrency: int = 4) -> None:
        self.observer = observer
        self._concurrency = concurrency
        self._bulkheads: dict[str, Bulkhead] = {}
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

    @contextmanager
    def call(self, provider: str, call: str) -> Iterator[None]:
        """Holds a slot of the provider's bulkhead, reports the call, maps what botocore raises."""
        with self._lock:
            bulkhead = self._bulkheads.setdefault(
                provider, Bulkhead(provider, limit=self._concurrency)
            )
        with bulkhead.slot(), self._mapped(provider, call):
            yield

    @contextmanager
    def _mapped(self, provider: str, call: str) -> Iterator[None]:
        try:
            yield
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            self.observer.provider_request(provider=provider, call=call, code=code)
            message = f"{provider} {call} failed: {code}"
            if code in TRANSIENT_CODES or status >= 500 or status == 429:
                raise errors.ProviderUnavailable(message, code=code) from None
            raise errors.ProviderRejected(message, code=code) from None
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            self.observer.provider_request(provider=provider, call=call, code=type(exc).__name__)
            raise errors.ProviderUnavailable(
                f"{provider} {call} failed: {type(exc).__name__}"
            ) from None
        self.observer.provider_request(provider=provider, call=call, code="200")
