"""The controller's own AWS identity: what botocore's default credential chain finds in the
controller's environment, used only as the base of a role chain (never served: see
``spec.awsCredentials.controllerIdentity`` in docs/api.md).

The chain is botocore's, configured only by its documented environment variables — rotator adds
no lookup of its own, so the identity a pod is given is the one rotator wears. In botocore's
order: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``; a profile's ``role_arn`` or
``web_identity_token_file``; ``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN`` (EKS IRSA);
shared credential files; ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` / ``_RELATIVE_URI`` with
``AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE)`` (ECS, EKS Pod Identity); the EC2 instance metadata
service. Temporary credentials come back refreshable: botocore renews them itself (from 15 min
before their expiry), and :meth:`ControllerIdentity.session` reports the expiry of the keys it
hands out, so that a chain built on them expires no later.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import botocore.session

from rotator import errors, formats
from rotator.providercalls import Failure
from rotator.providers.aws import clients as aws_clients
from rotator.providers.aws import sts
from rotator.providers.aws.clients import Clients

PROVIDER = "aws-identity"
CALL = "DefaultCredentialChain"


class NoIdentity(errors.ProviderRejected):
    """botocore's chain found no credentials in the controller's environment."""

    reason = "ControllerIdentityNotFound"


def classify(exc: Exception) -> Failure | None:
    """botocore's errors as :func:`~rotator.providers.aws.clients.classify` says; anything else
    the chain raises (a malformed endpoint answer, refreshed credentials still expired) is
    transient under its type name, but a ``ValueError`` — botocore refusing the configuration
    itself, such as a container endpoint on a host it does not allow — is permanent."""
    known = aws_clients.classify(exc)
    if known is not None:
        return known
    return Failure(type(exc).__name__, transient=not isinstance(exc, ValueError))


class ControllerIdentity:
    """The default chain's credentials, resolved once (botocore caches them and refreshes the
    temporary ones) and frozen for each use."""

    def __init__(
        self,
        clients: Clients,
        *,
        session_factory: Callable[[], botocore.session.Session] = botocore.session.Session,
    ) -> None:
        self._clients = clients
        self._session_factory = session_factory
        self._session: botocore.session.Session | None = None
        self._lock = threading.Lock()

    def session(self) -> sts.Session:
        """The controller's keys and their expiry (None: long-lived keys), through the
        ``aws-identity`` bulkhead and deadline; :class:`NoIdentity` when the chain finds none."""
        found = self._clients.run(PROVIDER, CALL, self._freeze, classifier=classify)
        if found is None:
            raise NoIdentity(
                "botocore's default credential chain found no AWS credentials in the "
                "controller's environment (IRSA, EKS Pod Identity, ECS, instance metadata, "
                "environment keys)"
            )
        return found

    def _freeze(self) -> sts.Session | None:
        # One caller at a time: the keys and the expiry read after them must be of the same
        # refresh (another thread's refresh in between would pair old keys with a new expiry).
        with self._lock:
            if self._session is None:
                self._session = self._session_factory()
            credentials = self._session.get_credentials()  # None is not cached: looked up again
            if credentials is None:
                return None
            frozen = credentials.get_frozen_credentials()
            # botocore has no public accessor for the expiry of refreshable credentials; static
            # credentials have none (tests/unit/test_aws_identity.py pins both).
            expiry = getattr(credentials, "_expiry_time", None)
        keys = formats.AWSKeys(frozen.access_key, frozen.secret_key, frozen.token)
        return sts.Session(keys, expiry.timestamp() if expiry is not None else None)
