"""Certificates and keys for a TLS deployment with SuperNode authentication.

``python -m experiments.run.certificates --out certificates --supernodes 4`` writes

* ``ca.crt`` / ``ca.key``: a self-signed certificate authority (the SuperNodes' and ``flwr``'s
  ``--root-certificates``),
* ``server.pem`` / ``server.key``: the SuperLink's certificate signed by that CA, valid for
  127.0.0.1 and localhost (plus any ``--host`` names, e.g. the compose service name),
* ``supernode-<i>.key`` / ``supernode-<i>.pub``: one EC key pair per SuperNode (NIST P-384;
  both in OpenSSH format: the private key for ``--auth-supernode-private-key``, the public key
  for ``flwr supernode register``), as Flower's SuperNode authentication requires.

Built with the ``cryptography`` package (a dependency of Flower), so no ``openssl`` binary is
needed. Keys are written readable by the owner only. :func:`tls_certificates` gives a ``--tls``
run its certificates for the length of the run.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import ipaddress
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Certificates are valid this long from their creation.
VALIDITY = dt.timedelta(days=365)
#: Names the SuperLink certificate is always valid for.
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class CertificateSet:
    """Paths of the files :func:`make_certificates` wrote.

    Attributes
    ----------
    ca_cert, server_cert, server_key : Path
        The CA certificate, the SuperLink certificate and its private key.
    supernode_keys, supernode_public_keys : tuple of Path
        Per SuperNode: private key (PEM) and public key (OpenSSH).

    """

    ca_cert: Path
    server_cert: Path
    server_key: Path
    supernode_keys: tuple[Path, ...]
    supernode_public_keys: tuple[Path, ...]


def _write(path: Path, data: bytes, *, private: bool) -> Path:
    path.write_bytes(data)
    path.chmod(0o600 if private else 0o644)
    return path


def _pem_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _subject_alt_names(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_certificates(out: Path, *, supernodes: int, hosts: tuple[str, ...] = ()) -> CertificateSet:
    """Write a CA, a SuperLink certificate and ``supernodes`` SuperNode key pairs to ``out``.

    Parameters
    ----------
    out : Path
        Folder (created if missing).
    supernodes : int
        Number of SuperNode key pairs, >= 0.
    hosts : tuple of str
        Extra names (DNS or IP) the SuperLink certificate is valid for, beyond 127.0.0.1 and
        localhost.

    """
    if supernodes < 0:
        raise ValueError(f"supernodes must be >= 0; got {supernodes}")
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "FedCGD test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(_subject_alt_names((*LOOPBACK_NAMES, *hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(out / "ca.key", _pem_private(ca_key), private=True)
    ca_path = _write(out / "ca.crt", ca_cert.public_bytes(pem), private=False)
    cert_path = _write(out / "server.pem", server_cert.public_bytes(pem), private=False)
    key_path = _write(out / "server.key", _pem_private(server_key), private=True)
    keys, publics = [], []
    for i in range(supernodes):
        node_key = ec.generate_private_key(ec.SECP384R1())
        private_openssh = node_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        keys.append(_write(out / f"supernode-{i}.key", private_openssh, private=True))
        openssh = node_key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        publics.append(_write(out / f"supernode-{i}.pub", openssh + b"\n", private=False))
    return CertificateSet(ca_path, cert_path, key_path, tuple(keys), tuple(publics))


@contextlib.contextmanager
def tls_certificates(
    enabled: bool, folder: Path | None, supernodes: int
) -> Iterator[CertificateSet | None]:
    """Certificates and SuperNode keys for a ``--tls`` run (None without TLS).

    Written to ``folder`` (kept) when given, else to a temporary ``fedcgd-certificates-*``
    folder that is removed, private keys included, when the run ends (also on errors and
    signals).
    """
    if not enabled:
        yield None
        return
    target = folder if folder is not None else Path(tempfile.mkdtemp(prefix="fedcgd-certificates-"))
    try:
        target.mkdir(parents=True, exist_ok=True)
        tls = make_certificates(target, supernodes=supernodes)
        kept = "kept" if folder is not None else "removed at the end"
        print(f"TLS certificates and SuperNode keys in {target} ({kept})", flush=True)
        yield tls
    finally:
        if folder is None:
            shutil.rmtree(target, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Command line: write the certificate set."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("certificates"))
    parser.add_argument("--supernodes", type=int, default=4)
    parser.add_argument(
        "--host", action="append", default=[], help="extra SuperLink name (repeatable)"
    )
    args = parser.parse_args(argv)
    made = make_certificates(args.out, supernodes=args.supernodes, hosts=tuple(args.host))
    print(f"wrote {made.ca_cert}, {made.server_cert}, {len(made.supernode_keys)} SuperNode keys")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
