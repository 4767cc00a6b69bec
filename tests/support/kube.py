"""Clients for tests: as the admin, or as whoever a bearer token says."""

from __future__ import annotations

from kubernetes import client as k8s_client

from controllers.runtime import client as clients
from rotator_devkit.controlplane.cluster import LocalControlPlane


def token_client(control_plane: LocalControlPlane, token: str) -> clients.Client:
    """A client that authenticates with ``token`` only (no client certificate)."""
    configuration = k8s_client.Configuration()
    configuration.host = control_plane.server
    configuration.ssl_ca_cert = str(control_plane.ca_file)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return clients.Client(k8s_client.ApiClient(configuration))
