"""The local development environment behind ``rotator dev`` and the test suite's stand-ins.

``standins`` holds the local stand-ins for what rotator talks to outside Kubernetes — an OIDC
issuer that signs real JWTs, proxies in front of moto's STS and IAM (which check the SigV4
signatures moto does not), and Google's and Azure AD's token services (which have no emulator) —
speaking and checking the documented protocols, and remembering every secret they issue for the
test suite's leak scan. The test suite and ``rotator dev`` use the same ones. Needs the ``dev``
extra (moto, PyJWT).
"""
