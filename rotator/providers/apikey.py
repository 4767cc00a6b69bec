"""API keys: copied from a Secret as they are; they do not expire."""

from __future__ import annotations

from collections.abc import Mapping

from rotator import errors
from rotator.credentials import Credential

DATA_KEY = "apiKey"


def copy_key(source: Mapping[str, bytes], *, key: str, secret_name: str) -> Credential:
    """The key from ``source[key]``, trimmed of surrounding whitespace (a pasted newline)."""
    if key not in source:
        raise errors.MissingKey(f"Secret {secret_name} has no key {key!r}")
    value = source[key].strip()
    if not value:
        raise errors.InvalidInput(f"Secret {secret_name} key {key!r} is empty")
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        # Said by reason only: the decoder's own message quotes the offending byte.
        raise errors.InvalidInput(
            f"Secret {secret_name} key {key!r} is not UTF-8 text; an API key is one line of text"
        ) from None
    if any(c in value for c in (b"\n", b"\r", b"\0")):
        raise errors.InvalidInput(
            f"Secret {secret_name} key {key!r} holds several lines; an API key is one line"
        )
    return Credential({DATA_KEY: value})
