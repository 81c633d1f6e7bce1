"""Certificates and keys for a TLS deployment with SuperNode authentication (docs/deployment.md).

Every file created new, private keys 0600 from their creation, an existing set or a link refused.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class CertificateSet:
    """Paths of the files :func:`make_certificates` wrote (per SuperNode: PEM key, OpenSSH key)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    supernode_keys: tuple[Path, ...]
    supernode_public_keys: tuple[Path, ...]


def certificate_names(supernodes: int) -> list[str]:
    """The names of the files :func:`make_certificates` writes for ``supernodes`` key pairs."""
    nodes = [f"supernode-{i}.{ext}" for i in range(supernodes) for ext in ("key", "pub")]
    return ["ca.key", "ca.crt", "server.pem", "server.key", *nodes]


def _taken(out: Path, names: Sequence[str]) -> str:
    return (
        f"certificates folder {out} already holds {', '.join(names)}; remove the earlier set or "
        "choose another folder (an existing certificate or key is never overwritten)"
    )


def check_certificates_dir(out: Path, supernodes: int) -> None:
    """Refuse (ValueError, one line) a folder that is or holds a link, or holds a set's file."""
    if out.is_symlink():
        raise ValueError(
            f"certificates folder {out} is a symbolic link; allowed: a folder that is not a "
            "link (give the path it points to)"
        )
    if not out.exists():
        return  # created by make_certificates
    if not out.is_dir():
        raise ValueError(f"certificates folder {out} is not a folder")
    if links := sorted(p.name for p in out.iterdir() if p.is_symlink()):
        raise ValueError(
            f"certificates folder {out} holds symbolic links ({', '.join(links)}); allowed: "
            "a folder without links (a certificate or key is never written through one)"
        )
    if taken := [name for name in certificate_names(supernodes) if (out / name).exists()]:
        raise ValueError(_taken(out, taken))


def _pem(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
    form: serialization.PrivateFormat = serialization.PrivateFormat.PKCS8,
) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())


def make_certificates(out: Path, *, supernodes: int, hosts: tuple[str, ...] = ()) -> CertificateSet:
    """Write a CA, a SuperLink certificate and ``supernodes`` SuperNode key pairs to ``out``."""
    check_certificates_dir(out, supernodes)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:  # replaced by a link or a file since the check
        raise ValueError(f"certificates folder {out} cannot be opened as a folder ({err})") from err

    def write(name: str, data: bytes) -> Path:
        mode = 0o600 if name.endswith(".key") else 0o644
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, mode, dir_fd=folder)
        except FileExistsError as err:
            raise ValueError(_taken(out, [name])) from err
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
        return out / name

    now = dt.datetime.now(dt.UTC)
    ca_key, server_key = (rsa.generate_private_key(65537, 2048) for _ in range(2))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "FedCGD test CA")])

    def issue(
        subject: x509.Name, key: rsa.RSAPrivateKey, *extensions: tuple[x509.ExtensionType, bool]
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=365))
        )  # fmt: skip
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(ca_key, hashes.SHA256())

    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(("127.0.0.1", "localhost", *hosts)):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    ca_cert = issue(ca_name, ca_key, (x509.BasicConstraints(ca=True, path_length=None), True))
    server_cert = issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]), server_key,
        (x509.SubjectAlternativeName(names), False),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
    )  # fmt: skip
    pem, openssh = serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH
    try:
        write("ca.key", _pem(ca_key))
        ca = write("ca.crt", ca_cert.public_bytes(pem))
        server = write("server.pem", server_cert.public_bytes(pem))
        server_key_path = write("server.key", _pem(server_key))
        keys, publics = [], []
        for i in range(supernodes):
            node_key = ec.generate_private_key(ec.SECP384R1())
            keys.append(write(f"supernode-{i}.key", _pem(node_key, openssh)))
            public = node_key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
            publics.append(write(f"supernode-{i}.pub", public + b"\n"))
    finally:
        os.close(folder)
    return CertificateSet(ca, server, server_key_path, tuple(keys), tuple(publics))


@contextlib.contextmanager
def tls_certificates(
    enabled: bool, folder: Path | None, supernodes: int
) -> Iterator[CertificateSet | None]:
    """A ``--tls`` run's certificates and keys (None without): in ``folder`` or a temporary one."""
    if not enabled:
        yield None
        return
    target = folder if folder is not None else Path(tempfile.mkdtemp(prefix="fedcgd-certificates-"))
    try:
        tls = make_certificates(target, supernodes=supernodes)
        kept = "kept" if folder is not None else "removed at the end"
        print(f"TLS certificates and SuperNode keys in {target} ({kept})", flush=True)
        yield tls
    finally:
        if folder is None:
            shutil.rmtree(target, ignore_errors=True)
