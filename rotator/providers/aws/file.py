"""AWS credentials from a shared-credentials file in a Secret: copied into the derived Secret as
profile ``default`` with the policy's region (static keys do not expire), or read as the base of
a role chain (:func:`read_profile`)."""

from __future__ import annotations

from collections.abc import Mapping

from rotator import errors, formats
from rotator.credentials import Credential

DATA_KEY = "credentials"


def copy_profile(
    source: Mapping[str, bytes], *, key: str, profile: str, region: str, secret_name: str
) -> Credential:
    keys = read_profile(source, key=key, profile=profile, secret_name=secret_name)
    rendered = formats.render_aws_credentials(keys, region=region)
    return Credential({DATA_KEY: rendered.encode()})


def read_profile(
    source: Mapping[str, bytes], *, key: str, profile: str, secret_name: str
) -> formats.AWSKeys:
    """The keys of one profile of the file in ``source[key]`` (a Secret's decoded data)."""
    if key not in source:
        raise errors.MissingKey(f"Secret {secret_name} has no key {key!r}")
    try:
        text = source[key].decode("utf-8")
    except UnicodeDecodeError:
        raise errors.InvalidInput(f"Secret {secret_name} key {key!r} is not UTF-8 text") from None
    return formats.parse_aws_credentials(
        text, profile=profile, where=f"Secret {secret_name} key {key!r}"
    )
