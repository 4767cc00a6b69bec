"""The local development environment behind ``rotator dev`` and the test suite's stand-ins.

``standins`` holds the local stand-ins for what rotator talks to outside Kubernetes — an OIDC
issuer that signs real JWTs, a proxy in front of moto's STS, and Google's and Azure AD's token
services (which have no emulator) — speaking and checking the documented protocols. The test
suite and ``rotator dev`` use the same ones. Needs the ``dev`` extra (moto, PyJWT).
"""
