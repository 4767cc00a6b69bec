"""What a reconciler calls to record an Event, as a Protocol.

:class:`~.events.EventRecorder` is the one implementation in the controller (buffered, spam
filtered, aggregated); the reconcilers depend on this Protocol instead, so a test hands them a
plain recording list (``tests/support/memapi.py``'s ``RecordedEvents``) without a ``cast``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from controllers.runtime import events


class EventSink(Protocol):
    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Records an Event of ``type_`` (Normal, Warning) about ``obj``; never blocks, never
        raises (a recorder that cannot write drops and counts)."""


if TYPE_CHECKING:

    def _recorder_satisfies(recorder: events.EventRecorder) -> EventSink:
        """Never called: mypy fails here if the recorder stops satisfying the Protocol."""
        return recorder
