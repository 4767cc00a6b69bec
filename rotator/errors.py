"""Errors of the credential engine, classified for the controller that drives it.

::

    CredentialError                 minting a credential failed
    ├── InvalidInput                permanent until the user changes it: a referenced Secret holds
    │                               malformed data, or the spec asks for something impossible
    │   └── MissingKey              a referenced Secret lacks the key the spec names
    ├── ProviderRejected            permanent until the spec or a referenced Secret changes: the
    │                               provider said no (access denied, invalid role, bad secret)
    └── ProviderUnavailable         transient: throttling, 5xx, timeouts, connection failures

Every message is safe to show a user: it names what is wrong and where, never a secret value.
``reason`` is the PascalCase condition reason the controller reports. ``code`` is the provider's
own error code (``NoSuchEntity``, ``Throttling``, ``invalid_grant``, ``AADSTS7000215``…) when a
provider answered with one, else what happened instead (an exception's type name such as
``EndpointConnectionError``, ``DeadlineExceeded``, ``BulkheadFull``), so that callers branch on
it rather than search the message. Every call through :mod:`rotator.providercalls` sets it.
"""

from __future__ import annotations


class CredentialError(Exception):
    reason = "RotationFailed"
    transient = False

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class InvalidInput(CredentialError):
    reason = "InvalidSecretData"


class MissingKey(InvalidInput):
    reason = "SecretKeyNotFound"


class ProviderRejected(CredentialError):
    reason = "ProviderRejected"


class ProviderUnavailable(CredentialError):
    reason = "ProviderUnavailable"
    transient = True
