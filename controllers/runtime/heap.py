"""The interpreter's cyclic garbage collector around the cache sync: paused while the caches
fill, then what they hold is moved out of its reach (``gc.freeze``).

Why: the caches are the bulk of the heap — at 10,000 chains and 50,000 unrelated Secrets, about
two million dicts, lists and strings' containers — and they are acyclic, so reference counting
alone frees every cached object when its next version replaces it. The cyclic collector still
walks all of them: while the initial lists are decoded, a full collection runs each time the
heap has grown by a quarter (each one longer than the last), and afterwards every full
collection walks the whole cache again, which shows as a stall of every worker and a tail on
propagation latency. Pausing it for the sync and freezing what the sync loaded removes both; the
collector then only looks at what is allocated after the sync (Python's documentation suggests
the same for a long-lived loaded heap: ``gc.freeze``).

The price: a reference cycle that is garbage at the moment of the freeze is never collected.
What exists then is the caches, the threads and the modules; the garbage among it is bounded by
what one start creates, once.

Process-wide state: only the composition root asks for it (``ManagerOptions.freeze_heap``);
tests running a manager in their own process leave it off.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def loading() -> Iterator[None]:
    """Pauses cyclic collection for the block, then freezes what it allocated and resumes
    collection — also when the block raises (a sync timed out, the process is stopping)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
