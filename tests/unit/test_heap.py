"""The garbage collector around the cache sync (controllers/runtime/heap.py)."""

from __future__ import annotations

import gc

import pytest

from controllers.runtime import heap


@pytest.fixture(autouse=True)
def _restore_gc() -> object:
    enabled = gc.isenabled()
    yield None
    gc.unfreeze()  # this test process keeps collecting what it allocates
    if enabled:
        gc.enable()


def test_collection_is_paused_while_loading_and_what_was_loaded_is_frozen() -> None:
    gc.enable()
    gc.unfreeze()
    loaded: list[dict[str, object]] = []
    with heap.loading():
        assert not gc.isenabled()
        loaded.extend({"metadata": {"name": f"o-{i}"}} for i in range(1000))
    assert gc.isenabled()
    assert gc.get_freeze_count() >= 2000  # each object and its metadata dict
    # frozen: out of every generation the collector walks
    walked = {id(o) for o in gc.get_objects()}
    assert id(loaded[0]) not in walked
    assert id(loaded[0]["metadata"]) not in walked


def test_collection_resumes_when_the_sync_fails() -> None:
    gc.enable()
    with pytest.raises(TimeoutError), heap.loading():
        raise TimeoutError("caches did not sync")
    assert gc.isenabled()


def test_a_process_that_had_collection_off_keeps_it_off() -> None:
    gc.disable()
    with heap.loading():
        pass
    assert not gc.isenabled()
