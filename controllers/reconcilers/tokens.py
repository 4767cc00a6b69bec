"""Kubernetes service-account tokens from the TokenRequest API: web identity without an
external identity provider."""

from __future__ import annotations

from controllers.runtime import client as clients
from controllers.runtime import errors as api_errors
from controllers.runtime import objects
from rotator import errors
from rotator.observe import Observer

PROVIDER = "kubernetes-tokenrequest"


class ServiceAccountNotFound(errors.InvalidInput):
    reason = "ServiceAccountNotFound"


class ServiceAccountTokens:
    def __init__(self, api_client: clients.Client, observer: Observer) -> None:
        self._api = api_client
        self._observer = observer

    def token(self, namespace: str, name: str, *, audience: str, seconds: int = 600) -> str:
        """A fresh token for ServiceAccount ``namespace/name`` with ``audience`` (10 min: it is
        only exchanged at once for a cloud credential)."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": seconds},
        }
        try:
            response = self._api.create(
                objects.SERVICEACCOUNTS, body, namespace=namespace, name=name, subresource="token"
            )
        except api_errors.ApiError as exc:
            self._observer.provider_request(
                provider=PROVIDER, call="TokenRequest", code=str(exc.status or type(exc).__name__)
            )
            if isinstance(exc, api_errors.NotFound):
                raise ServiceAccountNotFound(f"ServiceAccount {name} not found") from None
            if exc.transient:
                raise errors.ProviderUnavailable(
                    f"TokenRequest for ServiceAccount {name}: {exc.reason or exc}"
                ) from None
            raise errors.ProviderRejected(
                f"TokenRequest for ServiceAccount {name} refused: {exc.reason or exc.status}"
            ) from None
        self._observer.provider_request(provider=PROVIDER, call="TokenRequest", code="201")
        return str(response["status"]["token"])
