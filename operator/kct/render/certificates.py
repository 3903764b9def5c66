"""The operator's own CA and the receivers' serving certificates: what to issue or renew, and issuing it.

Secure by default (`spec.receiver.tls.mode: issued`, as Strimzi runs its own CAs): without a Secret from the
user, the operator keeps a CA per TelemetryReceiver and a serving certificate for the Service's DNS names,
both in owned Secrets it re-applies on every reconcile. The decision is a pure function of the time and what
the Secrets hold (`plan_certificates`), so every case (first issue, renewal, CA renewal and its overlap, a
changed Service name, garbage in a Secret) is a unit test without a cluster; `ensure_certificates` carries the
plan out with `cryptography` (ECDSA P-256: small keys, fast to make).

CA renewal without a lost push: the new CA is published in the trust bundle (`ca-bundle` Secret) next to the
old one at once, but signs serving certificates only after `caPropagationMinutes`, when kubelet and the
brokers' trust-file reload have carried it to every broker; the old CA stays in the bundle until it expires,
so brokers that still trust only it keep working through the overlap. A serving certificate never outlives
the CA that signed it; it is re-issued once less than `renewBeforeHours` (or half its life, when that is
shorter: a certificate cut short by its CA's expiry) is left, or when its issuer or DNS names are not the
ones wanted.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass, replace
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kct.api.telemetry_receiver import IssuedCertificatesSpec

__all__ = [
    "CA_CERT_KEY",
    "CA_KEY_KEY",
    "CLOCK_SKEW",
    "PREVIOUS_CA_CERT_KEY",
    "PREVIOUS_CA_KEY_KEY",
    "CertState",
    "CertificatePlan",
    "KeyPair",
    "TlsMaterial",
    "ensure_certificates",
    "issue_ca",
    "issue_serving",
    "plan_certificates",
    "read_cert",
    "service_dns_names",
]

CA_CERT_KEY: Final = "ca.crt"
CA_KEY_KEY: Final = "ca.key"
PREVIOUS_CA_CERT_KEY: Final = "previous-ca.crt"
PREVIOUS_CA_KEY_KEY: Final = "previous-ca.key"
# Certificates start this long before they are made, so a peer whose clock is a little behind accepts them.
CLOCK_SKEW: Final = dt.timedelta(minutes=5)


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """Every name a pod may dial the Service by (the node stack's brokers use the fully qualified one)."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local")


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: str
    key_pem: str


@dataclass(frozen=True)
class CertState:
    """What a decision needs of a certificate: its validity, DNS names and which CA signed it."""

    not_before: dt.datetime
    not_after: dt.datetime
    dns_names: tuple[str, ...] = ()
    issuer: str | None = None
    """`current` or `previous` (the CA that verifies its signature), None when neither does."""


@dataclass(frozen=True)
class CertificatePlan:
    """What `ensure_certificates` does: each field a decision with its reason for the event."""

    new_ca: str | None
    """Why a new CA is made (None: keep the current one)."""
    keep_previous_ca: bool
    """The previous CA stays in the bundle (and may still sign)."""
    sign_with: str
    """`current` or `previous`: the CA that signs serving certificates now."""
    new_serving: str | None
    """Why a serving certificate is issued (None: keep it)."""


def _valid(cert: CertState | None, now: dt.datetime) -> bool:
    return cert is not None and cert.not_before <= now < cert.not_after


def plan_certificates(
    now: dt.datetime,
    settings: IssuedCertificatesSpec,
    dns_names: tuple[str, ...],
    ca: CertState | None,
    previous_ca: CertState | None,
    serving: CertState | None,
) -> CertificatePlan:
    """Pure: what to issue given the time and what the Secrets hold (None = absent or unreadable)."""
    new_ca: str | None = None
    if not _valid(ca, now):
        new_ca = "no valid CA" if ca is None else f"the CA expired at {ca.not_after.isoformat()}"
    elif ca is not None and ca.not_after - now <= dt.timedelta(hours=settings.ca_renew_before_hours):
        new_ca = f"the CA expires at {ca.not_after.isoformat()}, within caRenewBeforeHours"
    # After a renewal the old current CA becomes the previous one (and what it signed is the previous CA's);
    # otherwise the previous one is kept.
    previous = (ca if _valid(ca, now) else None) if new_ca is not None else previous_ca
    if new_ca is not None and serving is not None:
        serving = replace(serving, issuer="previous" if serving.issuer == "current" and previous else None)
    keep_previous = _valid(previous, now)
    if new_ca is not None:
        current_started = now - CLOCK_SKEW
    else:
        assert ca is not None
        current_started = ca.not_before
    propagated = now - (current_started + CLOCK_SKEW) >= dt.timedelta(minutes=settings.ca_propagation_minutes)
    sign_with = "current" if propagated or not keep_previous else "previous"
    if new_ca is not None and sign_with == "current":
        new_serving: str | None = "a new CA signs it"
    else:
        new_serving = _serving_reason(now, settings, dns_names, serving, sign_with)
    return CertificatePlan(new_ca, keep_previous, sign_with, new_serving)


def _serving_reason(now: dt.datetime, settings: IssuedCertificatesSpec, dns_names: tuple[str, ...],
                    serving: CertState | None, sign_with: str) -> str | None:
    if serving is None:
        return "no serving certificate"
    if serving.issuer != sign_with:
        return f"it is not signed by the {sign_with} CA"
    if sorted(serving.dns_names) != sorted(dns_names):
        return f"its DNS names {list(serving.dns_names)} are not the Service's {list(dns_names)}"
    lifetime = serving.not_after - serving.not_before
    renew_before = min(dt.timedelta(hours=settings.renew_before_hours), lifetime / 2)
    if now >= serving.not_after - renew_before:
        return f"it expires at {serving.not_after.isoformat()}, within renewBeforeHours"
    return None


# --------------------------------------------------------------------------------------- material


@dataclass(frozen=True)
class TlsMaterial:
    """The PEMs the Secrets carry after `ensure_certificates`: the CA (and the previous one during an
    overlap) and the serving pair; `events` says what was issued."""

    ca: KeyPair
    previous_ca: KeyPair | None
    serving: KeyPair
    serving_not_after: dt.datetime
    ca_not_after: dt.datetime
    events: tuple[str, ...] = ()

    @property
    def bundle(self) -> str:
        """The trust bundle brokers read: the current CA, then the previous one while it is valid."""
        return self.ca.cert_pem + (self.previous_ca.cert_pem if self.previous_ca is not None else "")


def read_cert(pem: str | None) -> x509.Certificate | None:
    """The first certificate of `pem`, or None when absent or not a certificate."""
    if not pem:
        return None
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError:
        return None


def _pair(cert_pem: str | None, key_pem: str | None) -> tuple[x509.Certificate, KeyPair] | None:
    """A certificate with the private key of its public key, else None (half a pair is no pair)."""
    cert = read_cert(cert_pem)
    if cert is None or not key_pem:
        return None
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError):
        return None
    if key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo) != \
            cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo):
        return None
    return cert, KeyPair(cert_pem or "", key_pem)


def _signed_by(cert: x509.Certificate, ca: x509.Certificate | None) -> bool:
    if ca is None:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _state(cert: x509.Certificate, issuer: str | None = None) -> CertState:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = tuple(sans.get_values_for_type(x509.DNSName))
    except x509.ExtensionNotFound:
        dns_names = ()
    return CertState(cert.not_valid_before_utc, cert.not_valid_after_utc, dns_names, issuer)


def _new_key() -> tuple[ec.EllipticCurvePrivateKey, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    return key, pem


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def issue_ca(now: dt.datetime, hours: int, common_name: str) -> KeyPair:
    """A self-signed CA (path length 0: it signs only leaf certificates)."""
    key, key_pem = _new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(now + dt.timedelta(hours=hours))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), key_pem)


def issue_serving(now: dt.datetime, hours: int, dns_names: tuple[str, ...], ca: KeyPair,
                  ip_addresses: tuple[str, ...] = ()) -> KeyPair:
    """A server certificate for `dns_names` signed by `ca`, never valid past the CA."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key, key_pem = _new_key()
    not_after = min(now + dt.timedelta(hours=hours), ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, (dns_names or ip_addresses)[0][:64])]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW).not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return KeyPair(_pem(cert), key_pem)


def ensure_certificates(
    now: dt.datetime,
    settings: IssuedCertificatesSpec,
    dns_names: tuple[str, ...],
    ca_data: dict[str, str],
    serving_data: dict[str, str],
    ca_name: str,
) -> TlsMaterial:
    """The material the Secrets should hold: what they hold (`ca_data`: the CA Secret's keys, `serving_data`:
    `tls.crt`/`tls.key`, decoded), with whatever `plan_certificates` decides issued anew."""
    ca_pair = _pair(ca_data.get(CA_CERT_KEY), ca_data.get(CA_KEY_KEY))
    previous_pair = _pair(ca_data.get(PREVIOUS_CA_CERT_KEY), ca_data.get(PREVIOUS_CA_KEY_KEY))
    serving_pair = _pair(serving_data.get("tls.crt"), serving_data.get("tls.key"))
    ca_cert = ca_pair[0] if ca_pair else None
    previous_cert = previous_pair[0] if previous_pair else None
    serving_state: CertState | None = None
    if serving_pair is not None:
        cert = serving_pair[0]
        issuer = "current" if _signed_by(cert, ca_cert) else "previous" if _signed_by(cert, previous_cert) else None
        serving_state = _state(cert, issuer)
    plan = plan_certificates(now, settings, dns_names, _state(ca_cert) if ca_cert else None,
                             _state(previous_cert) if previous_cert else None, serving_state)
    events: list[str] = []
    if plan.new_ca is not None:
        previous = ca_pair[1] if ca_pair is not None and plan.keep_previous_ca else None
        current = issue_ca(now, settings.ca_validity_hours, f"{ca_name} {now:%Y%m%dT%H%M%SZ}")
        events.append(f"issued a new CA: {plan.new_ca}")
    else:
        assert ca_pair is not None
        current = ca_pair[1]
        previous = previous_pair[1] if previous_pair is not None and plan.keep_previous_ca else None
    if plan.new_serving is not None:
        signer = previous if plan.sign_with == "previous" and previous is not None else current
        serving = issue_serving(now, settings.validity_hours, dns_names, signer)
        events.append(f"issued a serving certificate: {plan.new_serving}")
    else:
        assert serving_pair is not None
        serving = serving_pair[1]
    serving_cert = x509.load_pem_x509_certificate(serving.cert_pem.encode())
    current_cert = x509.load_pem_x509_certificate(current.cert_pem.encode())
    return TlsMaterial(current, previous, serving, serving_cert.not_valid_after_utc,
                       current_cert.not_valid_after_utc, tuple(events))
