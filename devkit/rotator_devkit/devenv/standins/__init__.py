"""Local stand-ins for the identity and token services rotator calls (see the package doc)."""
