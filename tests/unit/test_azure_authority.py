"""The Azure authority host flag takes a host name with a port: azure-identity refuses one
unless it carries a scheme (a Service name and port parses as a URL scheme), so rotator adds
``https://`` to a value that has none."""

from __future__ import annotations

import pytest
from azure.identity import ClientSecretCredential

from rotator.providers.azure_endpoints import authority_url


@pytest.mark.parametrize(
    ("given", "passed"),
    [
        ("login.microsoftonline.com", "https://login.microsoftonline.com"),
        ("standins.rotator-standins.svc:5005", "https://standins.rotator-standins.svc:5005"),
        ("127.0.0.1:5005", "https://127.0.0.1:5005"),
        ("https://login.example:8443", "https://login.example:8443"),
    ],
)
def test_an_authority_host_without_a_scheme_is_asked_over_https(given: str, passed: str) -> None:
    assert authority_url(given) == passed
    ClientSecretCredential("tenant", "client", "not-a-secret", authority=authority_url(given))


def test_azure_identity_itself_refuses_a_host_name_with_a_port() -> None:
    """Why :func:`authority_url` exists; when this starts passing, it may go."""
    with pytest.raises(ValueError, match="TLS protected"):
        ClientSecretCredential(
            "tenant", "client", "not-a-secret", authority="standins.rotator-standins.svc:5005"
        )


def test_a_plain_http_authority_is_still_refused() -> None:
    with pytest.raises(ValueError, match="TLS protected"):
        ClientSecretCredential(
            "tenant", "client", "not-a-secret", authority=authority_url("http://login.example")
        )
