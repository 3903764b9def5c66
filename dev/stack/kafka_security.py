"""The local stack broker's TLS and SCRAM material: a CA of the stack's own, the broker's certificate, a
client certificate for the mTLS listener and the SCRAM user's password, in `<state>/kafka-security/`.

Production Kafka clusters are reached through SASL_SSL or mTLS, so the stack's broker serves both beside
PLAINTEXT (kafka_broker.SecureListeners) and the tests connect through them as a user would. Made with the
`openssl` command (this module runs before any virtualenv exists, so no `cryptography`), once per state
directory; the broker's certificate again when the addresses it must name change (a node stack's pod
address). The broker reads PEM directly (`ssl.keystore.type=PEM`, Kafka 2.7+): no JKS, no keytool.

Files (all PEM; keys unencrypted PKCS#8, readable by the owner only):
  ca.crt                      the stack's CA: every client's trust anchor
  broker.pem                  the broker's key and certificate (SANs: the listeners' addresses)
  client.crt, client.key      an mTLS client (CN=kct-admin) for the SSL listener
  sasl-password               the SCRAM-SHA-512 password of SCRAM_USER
  client-sasl.properties      Kafka client properties for the SASL_SSL listener (the password by file)
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import _proc

__all__ = ["SCRAM_MECHANISM", "SCRAM_USER", "KafkaSecurity", "ensure"]

SCRAM_USER = "kct-admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_DAYS = 3650  # a development CA: it lives as long as the state directory


@dataclass(frozen=True)
class KafkaSecurity:
    """Where the material of one stack is (`ensure` made it)."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def broker_pem(self) -> Path:
        return self.directory / "broker.pem"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    @property
    def password_file(self) -> Path:
        return self.directory / "sasl-password"

    @property
    def password(self) -> str:
        return self.password_file.read_text().strip()

    @property
    def sasl_properties_file(self) -> Path:
        return self.directory / "client-sasl.properties"


def _openssl(args: list[str]) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise _proc.InstallError("kafka", "tls", "`openssl` is not on PATH (Debian: apt-get install openssl)")
    _proc.run([openssl, *args], tool="openssl", version="tls")


def _key(path: Path) -> None:
    _openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)])
    path.chmod(0o600)


def _san(hosts: Sequence[str]) -> str:
    names = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            names.append(f"IP:{host}")
        except ValueError:
            names.append(f"DNS:{host}")
    return ",".join(names)


def _signed(directory: Path, name: str, subject: str, extensions: str) -> None:
    """`<name>.key` and `<name>.crt`, signed by the stack's CA."""
    key, csr, crt = (directory / f"{name}.{ext}" for ext in ("key", "csr", "crt"))
    ext_file = directory / f"{name}.ext"
    _key(key)
    _openssl(["req", "-new", "-key", str(key), "-subj", subject, "-out", str(csr)])
    ext_file.write_text(extensions + "\n")
    _openssl(["x509", "-req", "-in", str(csr), "-CA", str(directory / "ca.crt"), "-CAkey", str(directory / "ca.key"),
              "-CAcreateserial", "-days", str(_DAYS), "-sha256", "-extfile", str(ext_file), "-out", str(crt)])
    csr.unlink()
    ext_file.unlink()


def ensure(state: Path, hosts: Sequence[str]) -> KafkaSecurity:
    """The material of the stack in `state` (made when missing); the broker's certificate names `hosts`."""
    security = KafkaSecurity(state / "kafka-security")
    directory = security.directory
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    if not (directory / "ca.key").exists() or not security.ca_file.exists():
        _key(directory / "ca.key")
        _openssl(["req", "-x509", "-new", "-key", str(directory / "ca.key"), "-subj", "/CN=kct stack Kafka CA",
                  "-days", str(_DAYS), "-sha256", "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", str(security.ca_file)])
        for stale in (security.broker_pem, security.client_cert):
            stale.unlink(missing_ok=True)
    san = _san(hosts)
    san_file = directory / "broker.san"
    if not security.broker_pem.exists() or not san_file.exists() or san_file.read_text() != san:
        _signed(directory, "broker", "/CN=kct-stack-kafka",
                f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=digitalSignature")
        # Kafka's PEM key store: the private key and the certificate chain in one file.
        pem = (directory / "broker.key").read_text() + (directory / "broker.crt").read_text()
        security.broker_pem.write_text(pem)
        security.broker_pem.chmod(0o600)
        san_file.write_text(san)
    if not security.client_cert.exists():
        _signed(directory, "client", f"/CN={SCRAM_USER}", "extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature")
    if not security.password_file.exists():
        security.password_file.write_text(secrets.token_urlsafe(24) + "\n")
        security.password_file.chmod(0o600)
    security.sasl_properties_file.write_text(
        "# Written by dev/stack/kafka_security.py: the stack broker's SASL_SSL listener, as a Kafka client.\n"
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={SCRAM_MECHANISM}\n"
        f"sasl.username={SCRAM_USER}\n"
        f"sasl.password={security.password}\n"
        f"ssl.ca.location={security.ca_file}\n")
    security.sasl_properties_file.chmod(0o600)
    return security
