"""Kubernetes service-account tokens from the TokenRequest API: web identity without an
external identity provider.

rotator may create tokens for every ServiceAccount in the cluster (RBAC can narrow
``serviceaccounts/token`` only to a fixed list of names, not to "those policies may use"), so
being allowed to write a policy must not mean being allowed to wear any identity. A token is
minted only for a ServiceAccount

- in the policy's own namespace (the path is built from validated names, never from text that
  could climb out of it), and
- that opted in: its ``rotator.dev/allowed-policies`` annotation names the policy, or is ``*``.

The ServiceAccount is read live right before the TokenRequest: the decision to mint is taken on
current state, and rotator keeps no cache of every ServiceAccount in the cluster for a call that
happens once per credential lifetime.
"""

from __future__ import annotations

import time

from controllers.reconcilers import api
from controllers.runtime import apiclient, objects
from controllers.runtime import errors as api_errors
from rotator import errors
from rotator.observe import Observer

PROVIDER = "kubernetes-tokenrequest"


class ServiceAccountNotFound(errors.InvalidInput):
    reason = "ServiceAccountNotFound"


class ServiceAccountNotPermitted(errors.InvalidInput):
    reason = "ServiceAccountNotPermitted"


class InvalidName(errors.InvalidInput):
    reason = "InvalidName"


def permits(service_account: objects.Body, policy: str) -> bool:
    """Whether the ServiceAccount's opt-in annotation names ``policy`` (or is ``*``)."""
    annotations = objects.meta(service_account).get("annotations") or {}
    allowed = {p.strip() for p in annotations.get(api.ALLOWED_POLICIES_ANNOTATION, "").split(",")}
    return "*" in allowed or policy in allowed


class ServiceAccountTokens:
    def __init__(self, api_client: apiclient.ApiClient, observer: Observer) -> None:
        self._api = api_client
        self._observer = observer

    def token(
        self, namespace: str, name: str, *, audience: str, policy: str, seconds: int = 600
    ) -> str:
        """A fresh token for ServiceAccount ``namespace/name`` with ``audience`` (10 min: it is
        only exchanged at once for a cloud credential), if the ServiceAccount lets ``policy``
        use it."""
        try:
            objects.path_segment(name, "serviceAccountName")
        except api_errors.InvalidName:
            raise InvalidName(
                f"serviceAccountName {name[:64]!r} is not the name of a ServiceAccount "
                "in this namespace"
            ) from None
        self._check_permitted(namespace, name, policy)
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [audience], "expirationSeconds": seconds},
        }
        began = time.perf_counter()
        try:
            response = self._api.create(
                objects.SERVICEACCOUNTS, body, namespace=namespace, name=name, subresource="token"
            )
        except api_errors.ApiError as exc:
            self._observer.provider_request(
                provider=PROVIDER,
                call="TokenRequest",
                code=str(exc.status or type(exc).__name__),
                seconds=time.perf_counter() - began,
            )
            raise _mapped(exc, name, "TokenRequest") from None
        self._observer.provider_request(
            provider=PROVIDER, call="TokenRequest", code="201", seconds=time.perf_counter() - began
        )
        return str(response["status"]["token"])

    def _check_permitted(self, namespace: str, name: str, policy: str) -> None:
        try:
            account = self._api.get(objects.SERVICEACCOUNTS, name, namespace=namespace)
        except api_errors.ApiError as exc:
            raise _mapped(exc, name, "reading") from None
        if not permits(account, policy):
            raise ServiceAccountNotPermitted(
                f"ServiceAccount {name} does not let this policy use it: annotate it with "
                f"{api.ALLOWED_POLICIES_ANNOTATION}={policy} (a comma-separated list of "
                "policy names, or * for every policy in the namespace)"
            )


def _mapped(exc: api_errors.ApiError, name: str, what: str) -> errors.CredentialError:
    if isinstance(exc, api_errors.NotFound):
        return ServiceAccountNotFound(f"ServiceAccount {name} not found")
    if exc.transient:
        return errors.ProviderUnavailable(
            f"{what} ServiceAccount {name}: {exc.reason or type(exc).__name__}"
        )
    return errors.ProviderRejected(
        f"{what} ServiceAccount {name} refused: {exc.reason or exc.status}"
    )
