"""The listener's TLS: the context, its reload when the mounted files change, and who a client certificate is.

Reload without restart: kubelet swaps a mounted Secret's files when the Secret changes (cert-manager's or the
operator's renewal). `TlsReloader.reload_if_changed` compares the files' content hash (mtimes of kubelet's
symlink swaps are not reliable, and inotify does not see through them) and, when it changed, loads the new
pair into the same `SSLContext`: OpenSSL copies a context's certificate into each connection at its start, so
new handshakes get the new certificate and open connections keep the one they began with. A pair that does not
load (a key not matching its certificate half-way through a swap) is logged and retried on the next check; the
old one keeps serving (the pair is proven on a scratch context before the live one is touched). A changed
client CA bundle is added to the context's trust store (OpenSSL cannot remove a CA from a live store: a CA
dropped from the bundle stays trusted until the process restarts).

Identity (the trust model, docs/security.md): with a client CA, a push's principal is the verified
certificate's, its CN (or, without one, its first DNS SAN), and `allowedSubjects` restricts which CN or DNS SAN
is accepted; a `kct-principal` header cannot override it. The header is believed only from a sender that
proved it holds the push token.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kct.receiver.config import TlsConfig

__all__ = ["TlsReloader", "build_ssl_context", "certificate_identity"]

log = logging.getLogger(__name__)

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def build_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server context: the pair, min version, TLS 1.2 suites, and client verification when a CA is set."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = _VERSIONS[tls.min_version]
    if tls.cipher_suites:
        ctx.set_ciphers(":".join(tls.cipher_suites))
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file is not None:
        ctx.load_verify_locations(cafile=tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if tls.client_certificate == "require" else ssl.CERT_OPTIONAL
    return ctx


def certificate_identity(cert: Any, allowed: tuple[str, ...] = ()) -> str | None:
    """The principal of a verified peer certificate as `ssl` reports it (`getpeercert()`): its CN, else its first
    DNS SAN; None without a certificate, or when `allowed` is set and neither its CN nor a DNS SAN is in it."""
    if not cert:
        return None
    common_names = [str(value) for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName"]
    dns_names = [str(value) for kind, value in cert.get("subjectAltName", ()) if kind == "DNS"]
    if allowed and not set(allowed).intersection(common_names + dns_names):
        return None
    names = common_names + dns_names
    return names[0] if names else None


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _digest_of(*contents: bytes | None) -> str:
    """As `_digest` of files holding `contents` (None: missing)."""
    digest = hashlib.sha256()
    for content in contents:
        digest.update(b"<missing>" if content is None else content)
        digest.update(b"\0")
    return digest.hexdigest()


@contextmanager
def _in_memory_files(*contents: bytes) -> Iterator[tuple[str, ...]]:
    """Paths OpenSSL can open that hold `contents`: anonymous memory files (Linux), else a private temporary
    directory."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create("kct-tls", os.MFD_CLOEXEC) for _ in contents]
        try:
            for fd, content in zip(fds, contents, strict=True):
                with open(fd, "wb", closefd=False) as file:
                    file.write(content)
            yield tuple(f"/proc/self/fd/{fd}" for fd in fds)
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="kct-tls-") as directory:
        paths = []
        for number, content in enumerate(contents):
            path = Path(directory) / str(number)
            path.write_bytes(content)
            paths.append(str(path))
        yield tuple(paths)


def _digest(*paths: str | None) -> str:
    return _digest_of(*(None if path is None else _read(path) for path in paths))


class TlsReloader:
    """Reloads the certificate, key and client CA of a live context when their files' content changes."""

    def __init__(self, tls: TlsConfig, context: ssl.SSLContext) -> None:
        self.tls = tls
        self.context = context
        self._pair = _digest(tls.cert_file, tls.key_file)
        self._client_ca = _digest(tls.client_ca_file)
        self.reloads = 0

    def reload_if_changed(self) -> bool:
        """Load what changed; True when the context now has new material."""
        tls, changed = self.tls, False
        cert, key = _read(tls.cert_file), _read(tls.key_file)
        pair = _digest_of(cert, key)
        if pair != self._pair:
            try:
                self._load_pair(cert, key)
            except (OSError, ssl.SSLError) as error:
                # Half-way through a swap, or a broken Secret: keep serving the loaded pair, look again next time.
                log.warning("TLS certificate not reloaded", extra={"certFile": tls.cert_file, "error": str(error)})
            else:
                self._pair, changed = pair, True
                log.info("TLS certificate reloaded", extra={"certFile": tls.cert_file})
        client_ca = _digest(tls.client_ca_file)
        if tls.client_ca_file is not None and client_ca != self._client_ca:
            try:
                self.context.load_verify_locations(cafile=tls.client_ca_file)
            except (OSError, ssl.SSLError) as error:
                log.warning("client CA not reloaded", extra={"clientCaFile": tls.client_ca_file, "error": str(error)})
            else:
                self._client_ca, changed = client_ca, True
                log.info("client CA reloaded", extra={"clientCaFile": tls.client_ca_file})
        self.reloads += changed
        return changed

    def _load_pair(self, cert: bytes | None, key: bytes | None) -> None:
        """Load the pair into the live context only once it is proven to load. OpenSSL installs a certificate
        before it reads the key, and a certificate whose key does not match drops the key it had: loading a
        half-swapped pair straight into the live context left it with no key, and every handshake until the
        next check was reset. So the bytes read once are loaded into a scratch context first, then, the same
        bytes, into the live one (in memory files: the key never touches a disk)."""
        if cert is None or key is None:
            raise FileNotFoundError(self.tls.cert_file if cert is None else self.tls.key_file)
        with _in_memory_files(cert, key) as (cert_path, key_path):
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
            self.context.load_cert_chain(cert_path, key_path)
