"""Everything ``rotator dev`` runs besides the controller: a local control plane, moto (AWS),
the stand-ins (OIDC issuer, STS and IAM proxies that check signatures with what they issued,
Google and Azure AD token services, an Azure IMDS and a GCE metadata server for the
controller's own identity), a LiteLLM gateway for each sample Route marked for it (gateways.py,
one address for the whole run), an admin endpoint to drive the stand-ins (admin.py),
the CRDs, and the samples — one chain per credential source, made
runnable here by registering in the stand-ins what each sample names (its OIDC client, IAM user,
pool and provider, Azure application, managed identity, service account to impersonate).

Credentials minted here live ``lifetime`` seconds (3 minutes by default), so rotations happen
while you watch.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator_devkit.controlplane.cluster import (
    SERVICE_ACCOUNT_ISSUER,
    ControlPlaneOptions,
    LocalControlPlane,
)
from rotator_devkit.devenv import admin, gateways, manifests
from rotator_devkit.devenv.providers import AUDIENCE, CONTROLLER_ROLE, ProviderStandIns

NAMESPACE = "default"
__all__ = ["AUDIENCE", "CONTROLLER_ROLE", "NAMESPACE", "DevEnvironment"]


class DevEnvironment:
    def __init__(
        self,
        assets: Path,
        *,
        config: Path,
        lifetime: int = 180,
        gateway_port: int = gateways.DEFAULT_PORT,
        envoy_port: int = gateways.DEFAULT_ENVOY_PORT,
        admin_port: int = admin.DEFAULT_PORT,
        apiserver_flags: tuple[str, ...] = (),
    ) -> None:
        """``gateway_port``, ``envoy_port``, ``admin_port``: on 127.0.0.1, when free (0: any
        free port). ``apiserver_flags``: more kube-apiserver flags (a feature gate)."""
        self.config = config
        self.lifetime = lifetime
        self.gateway_port = gateway_port
        self.envoy_port = envoy_port
        self.admin_port = admin_port
        self.admin: admin.DevAdmin | None = None
        self.control_plane = LocalControlPlane(
            assets, ControlPlaneOptions(extra_apiserver_flags=apiserver_flags)
        )
        self.standins: ProviderStandIns | None = None
        self.gateways: gateways.DevGateways | None = None
        self._started: list[Any] = []

    def start(self) -> DevEnvironment:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        try:
            self._started.append(self.control_plane.start())
            api = clients.Client(restconfig.load(str(self.control_plane.kubeconfig)))
            cluster_jwks = api.request("GET", "/openid/v1/jwks", accept="application/jwk-set+json")
            self.standins = ProviderStandIns(self._folder("standins"), lifetime=self.lifetime)
            self._started.append(self.standins.start())
            self.standins.trust_cluster(SERVICE_ACCOUNT_ISSUER, cluster_jwks)
            self._pod_identity_token.write_text(self.standins.pod_identity_token)
            manifests.install_crds(api, self.config)
            self._wait_for_default_service_account(api)
            self.gateways = gateways.DevGateways(
                self._folder("gateways"),
                self.standins,
                out=sys.stdout,
                port=self.gateway_port,
                envoy_port=self.envoy_port,
            )
            self._started.append(self.gateways)
            manifests.apply(api, self._samples(), namespace=NAMESPACE)
            self.gateways.start(api)
            self.admin = _placed(admin.DevAdmin(self.standins, self.gateways), self.admin_port)
            self._started.append(self.admin.start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for part in reversed(self._started):
            with contextlib.suppress(Exception):
                part.stop()
        self._started.clear()

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def controller_env(self) -> dict[str, str]:
        """Where the controller finds the providers (boto3 reads the AWS ones itself)."""
        assert self.standins is not None
        return self.standins.controller_env(token_file=self._pod_identity_token)

    @property
    def _pod_identity_token(self) -> Path:
        return self._folder("eks-pod-identity") / "token"

    def _folder(self, name: str) -> Path:
        folder = self.control_plane.dir / name
        folder.mkdir(exist_ok=True)
        return folder

    @staticmethod
    def _wait_for_default_service_account(api: clients.Client) -> None:
        def exists() -> bool:
            try:
                api.get(objects.SERVICEACCOUNTS, "default", namespace=NAMESPACE)
            except errors.NotFound:
                return False
            return True

        manifests.wait(exists, what="the default ServiceAccount")

    def _samples(self) -> list[dict[str, Any]]:
        """config/samples, with what each names registered in the stand-ins."""
        assert self.standins is not None
        assert self.gateways is not None
        docs = self.standins.register_documents(manifests.load(self.config / "samples"))
        return self.gateways.prepare(docs, NAMESPACE)

    def gateway_rows(self) -> list[gateways.Row]:
        """The live table's gateway block (:meth:`gateways.DevGateways.rows`)."""
        return self.gateways.rows() if self.gateways is not None else []

    def on_gateway_change(self, callback: Callable[[], None]) -> None:
        """``callback`` is called whenever a gateway takes a new configuration into service."""
        if self.gateways is not None:
            self.gateways.on_change = callback

    @property
    def admin_url(self) -> str:
        assert self.admin is not None
        return self.admin.url


def _placed(endpoint: admin.DevAdmin, port: int) -> admin.DevAdmin:
    """``endpoint`` on ``port`` of 127.0.0.1, or on a free one if it is taken."""
    if port:
        try:
            return endpoint.place(("127.0.0.1", port), "127.0.0.1")
        except OSError:
            return endpoint.place(("127.0.0.1", 0), "127.0.0.1")
    return endpoint
