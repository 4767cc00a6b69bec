"""Route configuration formats behind one interface (:class:`~.base.Format`): an inputs hash,
and render → text plus gaps. ``spec.output.format`` picks one here (:func:`of`), the one place
the choice is made; a new format is a new module and an entry of :data:`FORMATS`.

- :mod:`.base` — the resolved inputs every format reads, the interface and its answer;
- :mod:`.own` — rotator's own format, the default;
- :mod:`.litellm` — LiteLLM proxy's ``config.yaml``, whose gaps the Route reports;
- :mod:`.envoy` — an Envoy proxy's bootstrap, listeners, clusters and credential files, which
  it reloads with no restart.
"""

from __future__ import annotations

from collections.abc import Mapping

from controllers.reconcilers import api
from controllers.reconcilers.route.formats import envoy, litellm, own
from controllers.reconcilers.route.formats.base import Format

FORMATS: Mapping[str, Format] = {f.name: f for f in (own.FORMAT, litellm.LITELLM, envoy.ENVOY)}
"""``spec.output.format`` → its format (the CRD's enum)."""


def of(route: api.Route) -> Format:
    """The format ``route`` asks for; rotator's own when it names none, or one this build does
    not know (an older CRD's value: as before, rendered in rotator's own)."""
    name = str((route["spec"].get("output") or {}).get("format") or api.DEFAULT_OUTPUT_FORMAT)
    return FORMATS.get(name, own.FORMAT)


__all__ = ["FORMATS", "Format", "of"]
