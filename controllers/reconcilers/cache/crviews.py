"""What the BackendSecurityPolicy, ServiceBackend and Route caches keep of each object: only what
a reconciler, an event mapper or an index reads (informer transforms, as
``controllers/reconcilers/cache/secretviews.py`` does for Secrets).

The runtime already drops ``metadata.managedFields`` and kubectl's last-applied annotation from
every cached object (``controllers.runtime.informer.strip_never_read``); these views keep, of the
rest:

- ``apiVersion``, ``kind`` and ``metadata`` name, namespace, uid, resourceVersion, generation and
  deletionTimestamp — keys, Event references, status preconditions, ``observedGeneration``,
  the generation predicates and deletion;
- policies: also ``finalizers`` (the IAM-key release) and their ``rotator.dev/…`` annotations
  (``rotate-requested-at``, ``skip-release``), nobody else's — so another tool's annotation no
  longer wakes the policy either;
- backends and routes: also ``creationTimestamp`` (``backend.settling``);
- ``spec`` whole (indexes, credential sources, the route configuration), and ``status`` whole:
  each reconciler merges its conditions into the cached status and writes only when the result
  differs from it, so a status field missing from the cache would be written on every
  reconcile. Fields no decision reads (``expirationTime``, ``lastRotationTime``…) stay for that
  comparison, and ``rotator dev``'s table shows them.

Dropped: labels, other annotations, ownerReferences, creationTimestamp of policies,
generateName and whatever else metadata holds.

Bytes per cached object (``len(json.dumps(obj, separators=(",", ":")))``), measured on a local
control plane after one reconcile (status written by rotator, managedFields of two managers) —
as the API server lists it / after ``strip_never_read`` (before these views) / after them:

=====================  ================================  ==================
kind                   applied by Helm + Argo CD [1]_    plain ``create``
=====================  ================================  ==================
BackendSecurityPolicy  3394 / 1297 / 856 (34 % less)     1827 / 894 / 851
ServiceBackend         2925 / 1078 / 680 (37 % less)     1420 / 678 / 678
Route (one backend)    3252 / 1285 / 887 (31 % less)     1729 / 888 / 888
=====================  ================================  ==================

.. [1] five ``app.kubernetes.io``/``helm.sh`` labels, Helm's two release annotations, Argo CD's
   tracking id and kubectl's last-applied annotation. The rest is mostly ``status``: three
   conditions are ~500 of a Route's 888 bytes.

In memory a decoded object takes about five times its JSON; the informer's last step
(``controllers.runtime.compaction``: keys and strings interned, dicts of one shape sharing a key
table, lists exact) brings that to about twice its JSON. Bytes per object of a scale-benchmark
chain (plain ``create``, each object from its own watch event), by two methods: the sizes of the
distinct objects it holds (``sys.getsizeof``; as decoded / keys and strings interned), and
everything the cache keeps allocated, allocator overhead and newly interned strings included
(``tracemalloc``, as ``python -m tests.bench.scale`` prints it; the store's own entry not
counted), with key tables shared:

=====================  ===========  =====================  ===============================
kind                   as decoded   keys, strings shared   key tables shared (tracemalloc)
=====================  ===========  =====================  ===============================
BackendSecurityPolicy  4634         2447                   2043
ServiceBackend         3517         1950                   1344
Route (one backend)    4882         2817                   1847
=====================  ===========  =====================  ===============================

By the first method a route with shared key tables holds 1,635 bytes
(tests/unit/test_compaction.py). What is left is mostly the values no two objects share: names,
uids, resourceVersions, condition messages and timestamps.
"""

from __future__ import annotations

from collections.abc import Iterable

from controllers.runtime import objects
from controllers.runtime.objects import Body

_IDENTITY = ("name", "namespace", "uid", "resourceVersion", "generation", "deletionTimestamp")
ROTATOR_ANNOTATION_PREFIX = "rotator.dev/"
ITEM_BYTES = 64 << 10
"""JSON bytes of one policy, backend or route as the API server lists it, at most as usual: the
byte bound of these views' list pages is the ``limit`` they ask for (500) times this, 32 MiB
(``chaincache``; ``informer.page_bytes``). Why this figure: the largest measured above is 3.4
KiB (Helm and Argo CD labels, kubectl's last-applied copy, managedFields of two managers), and
64 KiB is that nineteen times over — 16 KiB of metadata as the metadata-only Secret view allows,
the rest for a long route or many conditions. Why not the largest object the API server stores
(etcd's 1.5 MiB, :data:`~controllers.runtime.informer.ITEM_BYTES`): 500 of those are 750 MiB,
so the bound was the client's 128 MiB for each of the three views, and those three and the two
Secret views list at once at start, under the chart's 512 MiB limit (467 MiB of JSON at most;
now 177 MiB). An object that is larger still (up to 1.5 MiB) makes the page come again with half
the ``limit``, same bound: 21 of the largest fit in 32 MiB, so a list never fails on size."""


def _kept(obj: Body, metadata: Iterable[str]) -> Body:
    md = objects.meta(obj)
    kept: dict[str, object] = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "metadata": {k: md[k] for k in metadata if k in md},  # type: ignore[literal-required]
    }
    for part in ("spec", "status"):
        if part in obj:
            kept[part] = obj[part]
    return kept


def policy(obj: Body) -> Body:
    """The transform of the BackendSecurityPolicy cache."""
    kept = _kept(obj, (*_IDENTITY, "finalizers"))
    annotations = {
        k: v
        for k, v in (objects.meta(obj).get("annotations") or {}).items()
        if k.startswith(ROTATOR_ANNOTATION_PREFIX)
    }
    if annotations:
        kept["metadata"]["annotations"] = annotations
    return kept


def backend(obj: Body) -> Body:
    """The transform of the ServiceBackend cache."""
    return _kept(obj, (*_IDENTITY, "creationTimestamp"))


def route(obj: Body) -> Body:
    """The transform of the Route cache."""
    return _kept(obj, (*_IDENTITY, "creationTimestamp"))
