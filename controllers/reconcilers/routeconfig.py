"""Where the route configuration's model and rotator's own format were before
:mod:`controllers.reconcilers.route`: their names, re-exported so that no import breaks.
New code imports :mod:`.route.formats`, :mod:`.route.resolve` and :mod:`.route.configsecret`."""

from controllers.reconcilers.route.configsecret import MAX_SECRET_BYTES, secret_size
from controllers.reconcilers.route.formats.base import (
    BEARER,
    DUMPER,
    IMPLICIT_HEADER,
    RAW,
    CredentialHeader,
    GCPLocation,
    ResolvedBackend,
    ResolvedCredentials,
    api_key_header,
    config_hash,
    gcp_location,
)
from controllers.reconcilers.route.formats.own import (
    FORMAT_VERSION,
    RENDER_REVISION,
    render,
)
from controllers.reconcilers.route.formats.own import inputs_hash as inputs_digest
from controllers.reconcilers.route.resolve import InvalidCredentials, credentials_text

__all__ = [
    "BEARER",
    "DUMPER",
    "FORMAT_VERSION",
    "IMPLICIT_HEADER",
    "MAX_SECRET_BYTES",
    "RAW",
    "RENDER_REVISION",
    "CredentialHeader",
    "GCPLocation",
    "InvalidCredentials",
    "ResolvedBackend",
    "ResolvedCredentials",
    "api_key_header",
    "config_hash",
    "credentials_text",
    "gcp_location",
    "inputs_digest",
    "render",
    "secret_size",
]
