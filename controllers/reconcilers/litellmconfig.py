"""Where LiteLLM's format was before :mod:`controllers.reconcilers.route`: its names,
re-exported so that no import breaks. New code imports :mod:`.route.formats.litellm`."""

from controllers.reconcilers.route.formats.base import Gap
from controllers.reconcilers.route.formats.litellm import (
    FORMAT,
    NO_CREDENTIAL,
    RENDER_REVISION,
    SECRET_REFERENCES,
    build,
    render,
)
from controllers.reconcilers.route.formats.litellm import inputs_hash as inputs_digest

__all__ = [
    "FORMAT",
    "NO_CREDENTIAL",
    "RENDER_REVISION",
    "SECRET_REFERENCES",
    "Gap",
    "build",
    "inputs_digest",
    "render",
]
