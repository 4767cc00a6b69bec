"""The rotator.dev/v1alpha1 API as the reconcilers read it, and the names users depend on, in
three modules, every name of which is re-exported here (``api.X``, as when they were one):

- :mod:`.names` — group, resources, condition types, labels, annotations, finalizers and the
  names of the Secrets rotator writes;
- :mod:`.reasons` — the reasons of conditions and Events;
- :mod:`.types` — the objects as TypedDicts, and what an absent field means.

The CRD YAML in ``config/crd/bases`` is the source of truth for validation, defaults and CEL
rules: they are written and reviewed as YAML, the form ``kubectl explain`` and users see, and
generating them from Python would mean writing our own controller-gen. The TypedDicts are the
typed view of the same objects; ``tests/unit/test_api_schema.py`` walks the CRD schemas and fails
when a property exists on one side only, so the two cannot drift.
"""

from controllers.reconcilers.api.names import *  # noqa: F403
from controllers.reconcilers.api.reasons import *  # noqa: F403
from controllers.reconcilers.api.types import *  # noqa: F403
