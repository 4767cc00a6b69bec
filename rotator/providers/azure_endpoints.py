"""The Azure AD authority host rotator asks by default: what the controller's composition root
needs before azure-identity is loaded — :mod:`rotator.providers.azure`, which imports it (and
MSAL), loads when the first Azure policy calls Azure AD, not at start-up (issue 13)."""

DEFAULT_AUTHORITY = "login.microsoftonline.com"
