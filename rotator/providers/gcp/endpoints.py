"""Where the Google APIs are, and the one URL built from user input: what the controller's
composition root and GCP credential source need before google-auth is loaded — the modules that
import it (:mod:`~rotator.providers.gcp.common` and the minting modules) load when the first GCP
policy calls Google, not at start-up (issue 13)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rotator import errors


@dataclass(frozen=True)
class Endpoints:
    """Where the Google APIs are; overridable for private endpoints and tests."""

    sts_url: str = "https://sts.googleapis.com/v1/token"
    iam_credentials_url: str = "https://iamcredentials.googleapis.com"
    token_uri: str | None = None
    """Replaces the ``token_uri`` of service-account keys when set."""


_EMAIL = re.compile(r"[^@/?#%\\\s]+@[^@/?#%\\\s]+")
"""A service account's email as it may stand in a URL path: the CRD's pattern, and no ``%``
or ``\\`` either (an escaped ``/`` must not reach the path)."""


def impersonation_url(endpoints: Endpoints, service_account: str) -> str:
    """IAM credentials ``generateAccessToken`` of ``service_account`` (an email).

    The email is user input that becomes a path segment: checked here too, not only by the
    CRD's pattern, so an object admitted without it (an older CRD) still cannot steer the
    request to another path (the REST client's ``path_segment`` rule, for Google's API)."""
    if not _EMAIL.fullmatch(service_account) or any(ord(c) < 32 for c in service_account):
        raise errors.InvalidInput(
            "the service account to impersonate must be an email (name@project.iam"
            ".gserviceaccount.com) with no '/', '?', '#', '%' or '\\'"
        )
    return (
        f"{endpoints.iam_credentials_url.rstrip('/')}/v1/projects/-/serviceAccounts/"
        f"{service_account}:generateAccessToken"
    )
