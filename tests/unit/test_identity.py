"""``objects.Identity``: what the all-Secrets view keeps of each Secret. It must read exactly as
the dict it replaces (``{"metadata": {name, namespace, resourceVersion}}``) for every reader
(``objects.meta``/``key_of``, equality, ``dict()``), share the store's key string, hold less
than that dict, and pass through the informer's compaction untouched."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from controllers.reconcilers.cache import secretviews
from controllers.runtime import objects
from controllers.runtime.compaction import Compactor
from controllers.runtime.store import Store


def secret(name: str = "s", namespace: str = "t", version: str | None = "12345") -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": namespace, "uid": "u-1", "labels": {"a": "b"}}
    if version is not None:
        md["resourceVersion"] = version
    return {"apiVersion": "v1", "kind": "Secret", "metadata": md, "data": {"k": "dg=="}}


@pytest.mark.parametrize("version", ["12345", "0", "007", "abc", "", "99999999999999999999", None])
def test_it_reads_as_the_dict_it_replaces(version: str | None) -> None:
    kept = secretviews.identity_only(secret(version=version))
    md = {"name": "s", "namespace": "t"}
    if version is not None:
        md["resourceVersion"] = version
    assert kept == {"metadata": md}
    assert {"metadata": md} == kept
    assert dict(kept) == {"metadata": md}
    assert objects.meta(kept).get("resourceVersion") == version
    assert objects.name(kept) == "s"
    assert objects.namespace(kept) == "t"
    assert list(kept) == ["metadata"]
    assert kept.get("data") is None
    with pytest.raises(KeyError):
        kept["data"]


def test_a_cluster_scoped_identity_has_no_namespace() -> None:
    kept = objects.Identity.of({"metadata": {"name": "n", "resourceVersion": "3"}})
    assert kept == {"metadata": {"name": "n", "resourceVersion": "3"}}
    assert objects.key_of(kept) == "n"


def test_the_store_holds_it_under_its_own_key_string() -> None:
    kept = objects.Identity.of(secret())
    store = Store()
    store.upsert(kept)  # type: ignore[arg-type]
    (key,) = store.keys()
    assert key == "t/s"
    assert key is kept.key, "the store's key and the identity's are one string"
    got: object = store.get(objects.make_key("t", "s"))
    assert got is kept
    deleted: object = store.delete(objects.key_of(kept))
    assert deleted is kept


def test_it_holds_less_than_the_two_dicts_it_replaces() -> None:
    kept = objects.Identity.of(secret())
    as_dicts = {"metadata": {"name": "s", "namespace": "t", "resourceVersion": "12345"}}
    assert not hasattr(kept, "__dict__")
    assert sys.getsizeof(kept) < sys.getsizeof(as_dicts) + sys.getsizeof(as_dicts["metadata"])


def test_compaction_passes_it_through() -> None:
    kept = objects.Identity.of(secret())
    assert Compactor()(kept) is kept  # type: ignore[arg-type]


def test_the_store_shares_the_latest_identitys_key_after_an_update_and_a_relist() -> None:
    """A dict keeps the key it was first given; the store must take each new identity's, or
    every updated or re-listed Secret holds its key twice."""
    store = Store()
    store.upsert(objects.Identity.of(secret(version="1")))  # type: ignore[arg-type]
    updated = objects.Identity.of(secret(version="2"))
    store.upsert(updated)  # type: ignore[arg-type]
    (key,) = store.keys()
    assert key is updated.key
    relisted = objects.Identity.of(secret(version="3"))
    store.replace([relisted])  # type: ignore[list-item]
    (key,) = store.keys()
    assert key is relisted.key


@pytest.mark.parametrize(
    "version", ["\u0661\u0662\u0663", "\uff10\uff11", "\u00b2", "9" * 20, "9" * 5000]
)
def test_a_version_not_an_ascii_int64_decimal_is_kept_as_it_came(version: str) -> None:
    kept = objects.Identity.of(secret(version=version))
    assert objects.meta(kept)["resourceVersion"] == version


def test_a_version_that_is_not_a_string_does_not_break_the_view() -> None:
    """No API server sends one; if one did, the informer must not fail on it (a transform that
    raises stops the list, and the cache would never sync)."""
    raw = secret()
    raw["metadata"]["resourceVersion"] = 5
    version: object = objects.meta(objects.Identity.of(raw))["resourceVersion"]
    assert version == "5"
