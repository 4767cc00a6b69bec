"""The route config Secret ``rotator-route-<name>``: read from the cache once a reconcile, the
"already written?" rule, and its write.

Rendering is the costly part of a reconcile that changes nothing, and a restart reconciles every
Route: the config Secret records a hash of the inputs it was rendered from, bound to its data and
``config-hash`` (:data:`api.CONFIG_INPUTS_ANNOTATION`), and a Route whose inputs hash the same
and whose Secret still matches is not rendered (:meth:`ConfigSecret.in_place`: a restart at
10,000 routes renders none).

A configuration that cannot be written — larger than a Secret may hold, or refused by the API
server as invalid — is not retried (the same inputs fail the same way): ``Programmed`` turns False
(``ConfigTooLarge``, ``ConfigRejected``), its message says the previous configuration is stale, and
the next change of an input renders again.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from controllers.reconcilers import api, conditions
from controllers.reconcilers.cache import ownwrites, secretviews
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.derived import owner_reference
from controllers.reconcilers.metrics import RouteMetrics
from controllers.reconcilers.route.formats import base
from controllers.reconcilers.route.report import bounded
from controllers.runtime import apiclient, apply, objects
from controllers.runtime import errors as api_errors
from controllers.runtime.objects import Body
from controllers.runtime.store import Store

log = structlog.get_logger(__name__)

MAX_SECRET_BYTES = 1024 * 1024
"""What a Secret's data may hold, keys and decoded values together (the API server's
``MaxSecretSize``, 1 MiB)."""


def secret_size(text: str, files: Mapping[str, str] | None = None) -> int:
    """The size the API server checks against :data:`MAX_SECRET_BYTES` for a config Secret
    holding ``text`` (and a format's further ``files``): each key plus the UTF-8 bytes of its
    value."""
    data = {api.ROUTE_CONFIG_KEY: text, **(files or {})}
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


class ConfigSecrets:
    """Reads and writes the config Secrets of Routes, through the managed-Secret cache and the
    echoes of this controller's own writes."""

    def __init__(
        self,
        *,
        api_client: apiclient.ApiClient,
        managed_secrets: Store,
        own_writes: ownwrites.OwnWrites,
        metrics: RouteMetrics | None = None,
    ) -> None:
        self._api = api_client
        self._managed = managed_secrets
        self._own_writes = own_writes
        self._metrics = metrics

    def of(self, route: api.Route) -> ConfigSecret:
        """``route``'s config Secret as the cache holds it now: the one read of a reconcile."""
        md = route["metadata"]
        key = objects.make_key(md["namespace"], api.route_config_secret_name(md["name"]))
        actual = self._managed.get(key)
        return ConfigSecret(route, key, actual, self._api, self._own_writes, self._metrics)


@dataclass(frozen=True)
class ConfigSecret:
    """One Route's config Secret, as read once (:meth:`ConfigSecrets.of`)."""

    route: api.Route
    key: objects.ObjectKey
    actual: Mapping[str, Any] | None
    """What the cache held when read (None: no such Secret)."""
    api_client: apiclient.ApiClient
    own_writes: ownwrites.OwnWrites
    metrics: RouteMetrics | None = None
    """Counts each write that changed the Secret (``rotator_route_config_writes_total``)."""

    @property
    def name(self) -> str:
        return api.route_config_secret_name(objects.name(self.route))

    def in_place(self, inputs_hash: str) -> str | None:
        """The hash of the configuration in the Secret, if it was rendered from inputs of
        ``inputs_hash`` and holds what was written then (:data:`api.CONFIG_INPUTS_ANNOTATION`);
        None when it must be rendered: the inputs changed, the Secret is missing, edited, written
        by an earlier version (no record), or our last write is not in the cache yet."""
        actual = self.actual
        if actual is None or self.own_writes.unseen(self.key, actual) is not None:
            return None
        annotations = objects.meta(actual).get("annotations") or {}
        config_hash = annotations.get(api.CONFIG_HASH_ANNOTATION)
        data_hash = actual.get(secretviews.DATA_HASH)
        if not isinstance(config_hash, str) or not isinstance(data_hash, str):
            return None
        record = inputs_record(inputs_hash, data_hash, config_hash)
        wanted = _metadata(self.route, config_hash, record)
        return config_hash if apply.subset(wanted, actual.get("metadata")) else None

    def programmed(self) -> conditions.Cond:
        """``Programmed=True``. No hash in the message: a rotation rewrites the config Secret
        (whose annotation carries the hash), not the status of every Route that uses the
        credential."""
        return true(api.PROGRAMMED, api.REASON_PROGRAMMED, f"configuration in Secret {self.name}")

    def write(
        self,
        text: str,
        inputs_hash: str,
        files: Mapping[str, str] | None = None,
        *,
        fmt: str,
    ) -> tuple[conditions.Cond, str | None]:
        """Writes ``text`` (and a format's further ``files``) if it can be written:
        ``Programmed``, and the hash of the configuration now in place (None when it could not
        be written). A write sent is counted under format ``fmt``; one the Secret already holds
        is not sent, nor counted."""
        size = secret_size(text, files)
        if size > MAX_SECRET_BYTES:
            log.warning("route.config_too_large", secret_name=self.name, size=size)
            return false(
                api.PROGRAMMED,
                api.REASON_CONFIG_TOO_LARGE,
                f"the configuration is {size} bytes, over the {MAX_SECRET_BYTES} "
                f"a Secret can hold; {self._previous()}",
            ), None
        config_hash = base.config_hash(text, files)
        try:
            written = self._ensure(
                {api.ROUTE_CONFIG_KEY: text, **(files or {})}, config_hash, inputs_hash
            )
        except api_errors.Invalid as exc:  # the API server's message names fields, not data
            log.warning("route.config_rejected", secret_name=self.name, error=str(exc))
            return false(
                api.PROGRAMMED,
                api.REASON_CONFIG_REJECTED,
                f"the API server refused Secret {self.name}: {bounded([str(exc)])}; "
                f"{self._previous()}",
            ), None
        if written and self.metrics is not None:
            self.metrics.config_written(fmt)
        return self.programmed(), config_hash

    def _previous(self) -> str:
        """What the gateway still loads when the new configuration could not be written."""
        if self.actual is None:
            return f"Secret {self.name} was not written"
        return f"Secret {self.name} keeps the previous configuration, which is stale"

    def _ensure(self, plain: Mapping[str, str], config_hash: str, inputs_hash: str) -> bool:
        """Applies the Secret unless it already holds this configuration; whether it applied."""
        data = {k: base64.b64encode(v.encode()).decode() for k, v in plain.items()}
        actual = self.actual
        known = self.own_writes.unseen(self.key, actual) or actual  # the cache may lag
        if (
            known is not None
            and secretviews.holds_data(known, data)
            # The record of the inputs is left out of the comparison: a Secret is rewritten for
            # what a gateway reads, never for the record alone. One without a record (written
            # by an earlier version: an upgrade writes nothing), or with a stale or edited one,
            # gets it with its next configuration and is rendered at each start until then.
            and apply.subset(_metadata(self.route, config_hash, None), known.get("metadata"))
        ):
            return False
        record = inputs_record(inputs_hash, secretviews.data_hash(data), config_hash)
        desired: Body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _metadata(self.route, config_hash, record),
            "type": "Opaque",
            "data": data,
        }
        self.own_writes.apply_secret(self.api_client, desired, actual)
        log.info("route.config_written", secret_name=self.name, config_hash=config_hash[:12])
        return True


def inputs_record(inputs_hash: str, data_hash: str, config_hash: str) -> str:
    """:data:`api.CONFIG_INPUTS_ANNOTATION` for a config Secret holding data of ``data_hash``
    (:func:`secretviews.data_hash`) and configuration hash ``config_hash``, rendered from
    inputs of ``inputs_hash``: bound to all three, so an edit of the data or of either
    annotation no longer matches, and the configuration is rendered and repaired."""
    return hashlib.sha256(f"{inputs_hash}\n{data_hash}\n{config_hash}".encode()).hexdigest()


def _metadata(route: api.Route, config_hash: str, record: str | None) -> Body:
    """The config Secret's metadata for configuration ``config_hash`` (and its inputs'
    ``record``, when given)."""
    md = route["metadata"]
    labels, owner_annotations = api.owner_labels(api.ROUTE_LABEL, md["name"])
    annotations = {api.CONFIG_HASH_ANNOTATION: config_hash, **owner_annotations}
    if record is not None:
        annotations[api.CONFIG_INPUTS_ANNOTATION] = record
    return {
        "name": api.route_config_secret_name(md["name"]),
        "namespace": md["namespace"],
        "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY, **labels},
        "annotations": annotations,
        "ownerReferences": [owner_reference(route, "Route")],
    }
