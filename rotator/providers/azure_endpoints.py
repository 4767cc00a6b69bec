"""The Azure AD authority host rotator asks by default: what the controller's composition root
needs before azure-identity is loaded — :mod:`rotator.providers.azure`, which imports it (and
MSAL), loads when the first Azure policy calls Azure AD, not at start-up (issue 13)."""

DEFAULT_AUTHORITY = "login.microsoftonline.com"


def authority_url(host: str) -> str:
    """An authority host as azure-identity reads it: ``https://`` added when no scheme is given.

    azure-identity adds it itself only when :func:`urllib.parse.urlsplit` finds no scheme, and a
    host name with a port (``login.example:8443``) parses as the scheme ``login.example``: it then
    refuses the value as "not a TLS protected (https) URL". An address with a port happens to
    pass (a scheme cannot start with a digit), so the flag took ``127.0.0.1:8443`` but not a
    Service name. A value with a scheme is passed on as it is (``http://`` is refused there)."""
    return host if "://" in host else f"https://{host}"
