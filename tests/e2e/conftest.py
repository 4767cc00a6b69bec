"""The real control plane for end-to-end tests: one per session, a fresh namespace per test."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from controllers.controlplane import assets
from controllers.controlplane.cluster import LocalControlPlane
from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[LocalControlPlane]:
    folder = assets.find()  # fails with a clear message when KUBEBUILDER_ASSETS is not set
    started = time.monotonic()
    cp = LocalControlPlane(folder).start()
    print(f"\ncontrol plane up in {time.monotonic() - started:.1f} s at {cp.server}")
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api(control_plane: LocalControlPlane) -> clients.Client:
    return clients.Client(restconfig.load(str(control_plane.kubeconfig)))


@pytest.fixture
def namespace(api: clients.Client) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    api.create(objects.NAMESPACES, {"metadata": {"name": name}})
    yield name
    with contextlib.suppress(errors.NotFound):
        api.delete(objects.NAMESPACES, name)
