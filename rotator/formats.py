"""Credential file formats: the AWS shared-credentials file.

Parsing uses ``configparser``, which is what botocore itself uses for this INI dialect.
"""

from __future__ import annotations

import configparser
from dataclasses import dataclass, field

from rotator import errors


@dataclass(frozen=True)
class AWSKeys:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


def parse_aws_credentials(text: str, *, profile: str, where: str) -> AWSKeys:
    """The keys of ``profile`` in a shared-credentials file; ``where`` names it in errors."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as exc:
        # configparser quotes offending lines, which may hold a secret: keep only the kind of error
        raise errors.InvalidInput(
            f"{where} is not an AWS credentials file ({type(exc).__name__})"
        ) from None
    if not parser.has_section(profile):
        raise errors.InvalidInput(f"{where} has no profile [{profile}]")
    section = parser[profile]
    missing = [k for k in ("aws_access_key_id", "aws_secret_access_key") if not section.get(k)]
    if missing:
        raise errors.InvalidInput(f"{where} profile [{profile}] lacks {', '.join(missing)}")
    return AWSKeys(
        section["aws_access_key_id"].strip(),
        section["aws_secret_access_key"].strip(),
        (section.get("aws_session_token") or "").strip() or None,
    )


def render_aws_credentials(keys: AWSKeys, *, region: str) -> str:
    """A shared-credentials file with one profile, ``default``, including the region."""
    lines = [
        "[default]",
        f"aws_access_key_id = {keys.access_key_id}",
        f"aws_secret_access_key = {keys.secret_access_key}",
    ]
    if keys.session_token:
        lines.append(f"aws_session_token = {keys.session_token}")
    lines.append(f"region = {region}")
    return "\n".join(lines) + "\n"
