"""The listener's TLS: the context, its reload when the mounted files change, and who a client certificate is.

Reload without restart: kubelet swaps a mounted Secret's files when the Secret changes (cert-manager's or the
operator's renewal). `TlsReloader.reload_if_changed` compares the files' content hash (mtimes of kubelet's
symlink swaps are not reliable, and inotify does not see through them) and, when it changed, loads the new
pair into the same `SSLContext`: OpenSSL copies a context's certificate into each connection at its start, so
new handshakes get the new certificate and open connections keep the one they began with. A pair that does not
load (a key not matching its certificate half-way through a swap) is logged and retried on the next check; the
old one keeps serving. A changed client CA bundle is added to the context's trust store (OpenSSL cannot remove
a CA from a live store: a CA dropped from the bundle stays trusted until the process restarts).

Identity (the trust model, docs/security.md): with a client CA, a push's principal is the verified
certificate's, its CN (or, without one, its first DNS SAN), and `allowedSubjects` restricts which CN or DNS SAN
is accepted; a `kct-principal` header cannot override it. The header is believed only from a sender that
proved it holds the push token.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
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


def _digest(*paths: str | None) -> str:
    digest = hashlib.sha256()
    for path in paths:
        if path is not None:
            try:
                digest.update(Path(path).read_bytes())
            except OSError:
                digest.update(b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


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
        pair = _digest(tls.cert_file, tls.key_file)
        if pair != self._pair:
            try:
                self.context.load_cert_chain(tls.cert_file, tls.key_file)
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
