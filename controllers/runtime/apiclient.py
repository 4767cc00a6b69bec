"""What the reconcilers and commands call on the API server, as small Protocols.

The reconcilers depend on these, not on :class:`~.client.Client`, as controller-runtime's
reconcilers depend on the ``client.Client`` interface: the concrete client satisfies them
structurally (``mypy --strict`` checks it, through ``_client_satisfies`` below), and a test double
(``tests/support/memapi.py``) implements them without a ``cast``. Each Protocol is one capability,
and a caller names the smallest it needs:

* :class:`Reader` — ``get`` one object (the policy's live re-read, a ServiceAccount, a Secret
  the cache holds metadata of only).
* :class:`Writer` — ``create`` and ``patch``, which is every write a reconciler makes: a
  server-side apply of a derived Secret or of a status subresource, a JSON Patch that restarts a
  rollout, a strategic merge of a finalizer, a TokenRequest, an Event.
* :class:`ApiClient` — both: what a reconciler is given.
* :class:`Lister` — ``list``, for the commands (``kubectl rotator status``), never a reconciler:
  a reconciler reads lists from its informers' caches.

Errors are those of :mod:`~.errors`, as the concrete client raises them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from controllers.runtime.client import PatchType
from controllers.runtime.objects import Body, Resource

if TYPE_CHECKING:
    from controllers.runtime import client as clients


class Reader(Protocol):
    def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str = "",
        metadata_only: bool = False,
    ) -> Body: ...


class Writer(Protocol):
    def create(
        self,
        resource: Resource,
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str = "",
        field_manager: str | None = None,
    ) -> Body: ...

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Mapping[str, Any] | Sequence[Any],
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str = "",
        field_manager: str | None = None,
        force: bool = False,
    ) -> Body: ...


class ApiClient(Reader, Writer, Protocol):
    """Reads and writes single objects: everything a reconciler asks of the API server."""


class Lister(Protocol):
    def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        metadata_only: bool = False,
    ) -> Body: ...


class CommandClient(ApiClient, Lister, Protocol):
    """What the ``kubectl rotator`` commands call: single objects, and lists."""


if TYPE_CHECKING:

    def _client_satisfies(client: clients.Client) -> CommandClient:
        """Never called: mypy fails here if :class:`~.client.Client` stops satisfying the
        Protocols (a parameter renamed, a default dropped)."""
        return client
