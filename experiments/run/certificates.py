"""Certificates and keys for a TLS deployment with SuperNode authentication.

A CA, the SuperLink's certificate and one EC key pair per SuperNode, made with ``cryptography``;
every file created new, private keys 0600 from their creation, an existing set or a link refused
(docs/deployment.md, "TLS, SuperNode authentication, failures, resume").
:func:`tls_certificates` gives a ``--tls`` run its certificates for the length of the run.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
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
    """Paths of the files :func:`make_certificates` wrote (per SuperNode: PEM key, OpenSSH key)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    supernode_keys: tuple[Path, ...]
    supernode_public_keys: tuple[Path, ...]


#: Modes of the files: private keys for their owner only, certificates and public keys public.
PRIVATE_MODE, PUBLIC_MODE = 0o600, 0o644


def certificate_names(supernodes: int) -> list[str]:
    """The names of the files :func:`make_certificates` writes for ``supernodes`` key pairs."""
    names = ["ca.key", "ca.crt", "server.pem", "server.key"]
    for i in range(supernodes):
        names += [f"supernode-{i}.key", f"supernode-{i}.pub"]
    return names


def check_certificates_dir(out: Path, supernodes: int) -> None:
    """Refuse a folder the certificate set cannot be written to safely, before any key is made.

    Raises
    ------
    ValueError
        One line naming ``out``: a link, not a folder, holding a link, or holding a file of the set.
    """
    try:
        mode = out.lstat().st_mode
    except FileNotFoundError:
        return  # created by make_certificates
    if stat.S_ISLNK(mode):
        raise ValueError(
            f"certificates folder {out} is a symbolic link; allowed: a folder that is not a "
            "link (give the path it points to)"
        )
    if not stat.S_ISDIR(mode):
        raise ValueError(f"certificates folder {out} is not a folder")
    links = sorted(p.name for p in out.iterdir() if p.is_symlink())
    if links:
        raise ValueError(
            f"certificates folder {out} holds symbolic links ({', '.join(links)}); allowed: "
            "a folder without links (a certificate or key is never written through one)"
        )
    taken = [name for name in certificate_names(supernodes) if (out / name).exists()]
    if taken:
        raise ValueError(
            f"certificates folder {out} already holds {', '.join(taken)}; remove the earlier "
            "set or choose another folder (an existing certificate or key is never overwritten)"
        )


def _write(folder_fd: int, folder: Path, name: str, data: bytes, *, private: bool) -> Path:
    """Create ``name`` new in the open folder (``O_EXCL | O_NOFOLLOW``) at its mode; write it."""
    mode = PRIVATE_MODE if private else PUBLIC_MODE
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, mode, dir_fd=folder_fd)
    except FileExistsError as err:
        raise ValueError(
            f"certificates folder {folder} already holds {name}; remove the earlier set or "
            "choose another folder (an existing certificate or key is never overwritten)"
        ) from err
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), mode)
        handle.write(data)
    return folder / name


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

    ``hosts``: names (DNS or IP) the SuperLink certificate is valid for beyond 127.0.0.1 and
    localhost.

    Raises
    ------
    ValueError
        One line: ``out`` is refused (:func:`check_certificates_dir`), or a file of the set
        appeared in it meanwhile.
    """
    if supernodes < 0:
        raise ValueError(f"supernodes must be >= 0; got {supernodes}")
    check_certificates_dir(out, supernodes)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        folder_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:  # replaced by a link or a file since the check
        raise ValueError(f"certificates folder {out} cannot be opened as a folder ({err})") from err
    try:
        return _make_certificates(out, folder_fd, supernodes, hosts)
    finally:
        os.close(folder_fd)


def _make_certificates(
    out: Path, folder_fd: int, supernodes: int, hosts: tuple[str, ...]
) -> CertificateSet:
    def write(name: str, data: bytes, *, private: bool) -> Path:
        return _write(folder_fd, out, name, data, private=private)

    now = dt.datetime.now(dt.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "FedCGD test CA")])
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")])

    def signed(subject: x509.Name, key: rsa.RSAPrivateKey) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
        )

    ca_cert = (
        signed(ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_cert = (
        signed(server_name, server_key)
        .add_extension(_subject_alt_names((*LOOPBACK_NAMES, *hosts)), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    write("ca.key", _pem_private(ca_key), private=True)
    ca_path = write("ca.crt", ca_cert.public_bytes(pem), private=False)
    cert_path = write("server.pem", server_cert.public_bytes(pem), private=False)
    key_path = write("server.key", _pem_private(server_key), private=True)
    keys, publics = [], []
    for i in range(supernodes):
        node_key = ec.generate_private_key(ec.SECP384R1())
        private_openssh = node_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        keys.append(write(f"supernode-{i}.key", private_openssh, private=True))
        openssh = node_key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        publics.append(write(f"supernode-{i}.pub", openssh + b"\n", private=False))
    return CertificateSet(ca_path, cert_path, key_path, tuple(keys), tuple(publics))


@contextlib.contextmanager
def tls_certificates(
    enabled: bool, folder: Path | None, supernodes: int
) -> Iterator[CertificateSet | None]:
    """Certificates and SuperNode keys for a ``--tls`` run (None without TLS).

    In ``folder`` (kept) when given, else in a temporary folder removed when the run ends.
    """
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


def main(out: Path, supernodes: int = 4, hosts: Sequence[str] = ()) -> int:
    """``fedcgd certificates``: write the certificate set into ``out``; the exit code."""
    try:
        made = make_certificates(out, supernodes=supernodes, hosts=tuple(hosts))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {made.ca_cert}, {made.server_cert}, {len(made.supernode_keys)} SuperNode keys")
    return 0
