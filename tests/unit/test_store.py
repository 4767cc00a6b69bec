"""The indexed store keeps its indexes in step with every change."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.runtime.store import Store


def obj(ns: str, name: str, refs: list[str]) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name}, "spec": {"refs": refs}}


def by_refs(o: object) -> list[str]:
    assert isinstance(o, dict)
    return [f"{o['metadata']['namespace']}/{r}" for r in o["spec"]["refs"]]


ops = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "delete"]),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["x", "y", "z"]),
        st.lists(st.sampled_from(["s1", "s2", "s3"]), max_size=3),
    ),
    max_size=60,
)


@settings(max_examples=200)
@given(ops=ops)
def test_index_matches_a_full_scan(ops: list[tuple[str, str, str, list[str]]]) -> None:
    store = Store()
    store.add_index("refs", by_refs)
    for op, ns, name, refs in ops:
        if op == "upsert":
            store.upsert(obj(ns, name, refs))
        else:
            store.delete(f"{ns}/{name}")  # type: ignore[arg-type]
    for ns in "ab":
        for ref in ("s1", "s2", "s3"):
            value = f"{ns}/{ref}"
            scanned = {id(o) for o in store.items() if value in by_refs(o)}
            assert {id(o) for o in store.by_index("refs", value)} == scanned
        assert {id(o) for o in store.items(ns)} == {
            id(o) for o in store.items() if o["metadata"]["namespace"] == ns
        }
    for index in store._indices.values():  # a value's lone key is held without a set
        assert all(isinstance(keys, str) or len(keys) >= 2 for keys in index.values())


def test_replace_reports_upserts_and_deletions_in_scope_only() -> None:
    store = Store()
    store.upsert(obj("a", "x", []))
    store.upsert(obj("a", "y", []))
    store.upsert(obj("b", "x", []))
    upserts, deletions = store.replace([obj("a", "x", ["s1"]), obj("a", "z", [])], namespace="a")
    assert [(old is not None, new["metadata"]["name"]) for old, new in upserts] == [
        (True, "x"),
        (False, "z"),
    ]
    assert [d["metadata"]["name"] for d in deletions] == ["y"]
    assert sorted(store.keys()) == ["a/x", "a/z", "b/x"]


def test_index_added_late_covers_existing_objects() -> None:
    store = Store()
    store.upsert(obj("a", "x", ["s1"]))
    store.add_index("refs", by_refs)
    assert [o["metadata"]["name"] for o in store.by_index("refs", "a/s1")] == ["x"]


def test_items_of_a_namespace_are_found_without_an_index() -> None:
    store = Store()
    for ns, name in (("a", "x"), ("a", "y"), ("ab", "x"), ("b", "a")):
        store.upsert(obj(ns, name, []))
    assert sorted(o["metadata"]["name"] for o in store.items("a")) == ["x", "y"]
    assert store.items("c") == []
    assert len(store.items()) == 4
