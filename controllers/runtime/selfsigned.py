"""The self-signed serving certificate, made by ``cryptography`` — in a child process.

Run as ``python -m controllers.runtime.selfsigned``, it writes a fresh certificate and its
private key, both PEM, to its standard output (a pipe to the controller: neither touches a disk
or a log) and exits. :func:`controllers.runtime.tlsserving.self_signed_pem` runs it so: the
certificate is made once, at start, and ``cryptography``'s bindings stay resident for the life
of a process that imports them — about 8 MiB, a sixth of an idle controller then, for a
certificate that nothing else of an API-key or AWS controller needs.
"""

from __future__ import annotations

import datetime
import ipaddress
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)  # client-go's GenerateSelfSignedCertKey


def pem(host: str = "localhost", ips: tuple[str, ...] = ("127.0.0.1",)) -> tuple[bytes, bytes]:
    """``(certificate PEM, private key PEM)``: a fresh ECDSA P-256 key and a self-signed
    serving certificate for ``host`` and ``ips``, valid for a year (from an hour ago)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    alt_names: list[x509.GeneralName] = [x509.DNSName(host)]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


if __name__ == "__main__":
    cert_pem, key_pem = pem(sys.argv[1], tuple(sys.argv[2:]))
    sys.stdout.buffer.write(cert_pem + key_pem)
