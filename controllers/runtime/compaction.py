"""What every informer does last to each object it caches: the same object, in less memory.

A watch event is decoded on its own, so every cached object comes with its own copy of every key
(``"lastTransitionTime"`` is 67 bytes, in each condition of each object), of every value that
objects repeat (namespaces, apiVersions and kinds, condition types, reasons and messages,
timestamps written in the same second, the names and uids one object uses to refer to another),
and with its own hash table of keys in every dict. A :class:`Compactor` rebuilds the object so
that

* every key and string is interned (``sys.intern``: a string seen before is replaced by the one
  already held; an interned string is freed as usual once nothing holds it), but the values of
  :data:`PAYLOAD_FIELDS` and :data:`UNSHARED_FIELDS` and strings longer than
  :data:`LONGEST_SHARED`;
* dicts with the same keys in the same order share one table of keys (a *key-sharing* dict,
  PEP 412): a dict then holds only its values — 120 bytes for a six-key condition instead of
  272, 104 for a Secret's four-key metadata instead of 184;
* lists are copied to their exact length (a decoded list keeps the spare room it grew with).

The result equals the object it was given and is a plain ``dict``; only its memory differs.

Why key-sharing dicts are made the way they are: CPython offers no call that builds one. It
makes them for the ``__dict__`` of instances of one class (attributes set in the same order),
so each shape of dict gets a class of its own, an instance is given the values as attributes
and its ``__dict__`` is kept — a real ``dict`` that outlives the instance. The attributes are
set with ``object.__setattr__`` of a class that defines nothing, and a key that could mean
something to that call (``__class__``, ``__dict__``, any ``__…`` name, or a non-string) makes
a plain dict instead, so no key of an object can reach the class machinery. Writing to such a
dict, or a key it did not have, only turns it into an ordinary dict (as CPython does by itself).
On an interpreter that stops sharing keys this way the dicts are ordinary ones: memory grows,
nothing breaks (tests/unit/test_compaction.py fails then, as the figure it measures is gone).

User-keyed maps (labels, annotations, a Secret's data) are not shared: their keys are anyone's
choice, so each would be a shape, and a tenant could fill the table with them. The exception is
a map whose keys are all among the compactor's ``own_keys``, the labels and annotations a
controller writes itself (rotator's on the Secrets it writes: 2 labels and ~3 annotations on
each, ~60 bytes less per map shared). Such maps may take only shapes made of those keys, and at
most :data:`MAX_OWN_SHAPES` of them. Shapes are bounded per compactor (:data:`MAX_SHAPES`);
beyond that, dicts are plain again, as a user-keyed map always is otherwise.

Cached bodies of one API-key chain of the scale benchmark (its six objects, three Secrets also
in the metadata view), each from its own watch event: 21.4 KB decoded, 12.4 KB interned (sizes of
the distinct objects); 8.6 KB with shared keys, by ``tracemalloc`` (everything kept allocated:
``python -m tests.bench.scale`` prints it per kind). tests/unit/test_compaction.py measures a
route.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from controllers.runtime.objects import Body

PAYLOAD_FIELDS = frozenset({"data", "binaryData", "stringData"})
"""Top-level fields whose values are left alone: a Secret's or ConfigMap's payload, unique per
object (nothing to share), possibly large, and not to be kept in a process-wide table."""

UNSHARED_FIELDS = frozenset({"resourceVersion"})
"""Fields whose string values are not interned: unique to each version of each object, so an
interned copy would only add its entry in the interning table (~35 bytes)."""

LONGEST_SHARED = 63
"""Strings longer than this are not interned: what objects repeat is short (names, namespaces,
kinds, reasons, timestamps, uids), and a string of 64 characters or more is a digest, a token or
a message of its own object — an entry in the interning table (~40 bytes) for nothing; a
10,000-chain cluster caches 40,000 such digests (four per chain, on rotator's own Secrets)."""

USER_KEYED = frozenset({"labels", "annotations", "matchLabels", "nodeSelector"})
"""Maps whose keys users choose: interned, never shared (see the module docstring)."""

MAX_SHAPES = 1024
"""Distinct key tuples one compactor shares keys for. A chain of the scale benchmark has ~20."""

MAX_OWN_SHAPES = 32
"""Shapes the user-keyed maps of own keys may take, of :data:`MAX_SHAPES`. rotator writes a
handful (2 label maps, ~6 annotation maps); anyone who may label a Secret as rotator's could
write any subset of the own keys, ~6,000 of them, and fill the table for every other kind of
map, so these get a budget of their own. Beyond it such maps are plain, as before."""

MAX_SHARED_KEYS = 30
"""Dicts with more keys than this stay plain (CPython shares at most 30 keys per class)."""

_intern = sys.intern
_set = object.__setattr__


class Compactor:
    """Rebuilds objects to share keys, strings and key tables (see the module docstring).
    One per informer: its table of shapes holds what that informer's objects look like."""

    def __init__(
        self, max_shapes: int = MAX_SHAPES, own_keys: frozenset[str] = frozenset()
    ) -> None:
        self._max_shapes = max_shapes
        self._own_keys = own_keys
        self._shapes: dict[tuple[str, ...], type] = {}
        self._own_shapes = 0  # of self._shapes, those of user-keyed maps (MAX_OWN_SHAPES)
        self._lock = threading.Lock()

    @property
    def shapes(self) -> int:
        """How many shapes of dict share their keys."""
        return len(self._shapes)

    def __call__(self, obj: Body) -> Body:
        if type(obj) is not dict:  # a view's own compact form (``objects.Identity``)
            return obj
        return self._mapping(obj, "", top=True)

    def _value(self, value: Any, key: str) -> Any:
        kind = type(value)  # exact types: decoded JSON has no subclasses, and this runs per field
        if kind is str:
            if key in UNSHARED_FIELDS or len(value) > LONGEST_SHARED:
                return value
            return _intern(value)
        if kind is dict:
            return self._mapping(value, key)
        if kind is list:
            exact = value[:]  # a slice is allocated to its length; a decoded list is not
            for i, item in enumerate(exact):
                exact[i] = self._value(item, key)
            return exact
        return value

    def _mapping(self, value: dict[str, Any], key: str, *, top: bool = False) -> dict[str, Any]:
        """``value`` rebuilt: a key-sharing dict when its shape may be one, else a plain dict
        with interned keys. One pass, values converted as they are set; strings inline (most
        values are, and a call per string was a third of the time)."""
        if key not in USER_KEYED:
            cls = self._shape(value)
        elif self._own_keys and self._own_keys.issuperset(value):
            cls = self._shape(value, own=True)
        else:
            cls = None
        if cls is None:
            return {_intern(k): self._field(k, v, top) for k, v in value.items()}
        holder = cls()
        for k, v in value.items():
            kind = type(v)
            kept = v
            if kind is str:
                if k not in UNSHARED_FIELDS and len(v) <= LONGEST_SHARED:
                    kept = _intern(v)
            elif kind is dict or kind is list:
                kept = self._field(k, v, top)
            # the key need not be interned: the class's shared table already holds it
            _set(holder, k, kept)
        shared: dict[str, Any] = holder.__dict__
        return shared

    def _field(self, key: str, value: Any, top: bool) -> Any:
        if top and key in PAYLOAD_FIELDS and type(value) is dict:
            return {_intern(name): data for name, data in value.items()}
        return self._value(value, key)

    def _shape(self, value: dict[str, Any], *, own: bool = False) -> type | None:
        """The class whose instances' dicts share ``value``'s keys, in its order; None when it
        may not have one: empty, too many keys, a key the class machinery would read, or the
        table of shapes full (for a user-keyed map of ``own`` keys: its
        :data:`MAX_OWN_SHAPES`)."""
        if not value or len(value) > MAX_SHARED_KEYS:
            return None
        keys = tuple(value)
        cls = self._shapes.get(keys)
        if cls is not None:
            return cls
        if any(type(k) is not str or k.startswith("__") for k in keys):
            return None
        with self._lock:
            cls = self._shapes.get(keys)
            if cls is None:
                if len(self._shapes) >= self._max_shapes:
                    return None
                if own:
                    if self._own_shapes >= MAX_OWN_SHAPES:
                        return None
                    self._own_shapes += 1
                cls = self._shapes[keys] = type("SharedKeys", (), {})
        return cls
