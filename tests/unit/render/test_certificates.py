"""The operator's certificate decisions (`plan_certificates`, pure) and their execution (`ensure_certificates`)."""

from __future__ import annotations

import datetime as dt

from cryptography import x509

from kct.api.telemetry_receiver import IssuedCertificatesSpec
from kct.render.certificates import (
    CA_CERT_KEY,
    CA_KEY_KEY,
    PREVIOUS_CA_CERT_KEY,
    PREVIOUS_CA_KEY_KEY,
    CertState,
    TlsMaterial,
    ensure_certificates,
    plan_certificates,
    service_dns_names,
)

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
SETTINGS = IssuedCertificatesSpec(validity_hours=100, renew_before_hours=20, ca_validity_hours=1000,
                                  ca_renew_before_hours=200, ca_propagation_minutes=10)
NAMES = service_dns_names("tr-receiver", "ns")


def cert(start_h: float, end_h: float, issuer: str | None = None, names: tuple[str, ...] = ()) -> CertState:
    return CertState(NOW + start_h * HOUR, NOW + end_h * HOUR, names, issuer)


def test_service_names_cover_every_way_a_pod_dials_the_service() -> None:
    assert NAMES == ("tr-receiver", "tr-receiver.ns", "tr-receiver.ns.svc", "tr-receiver.ns.svc.cluster.local")


def test_nothing_yet_issues_a_ca_and_a_serving_certificate() -> None:
    plan = plan_certificates(NOW, SETTINGS, NAMES, None, None, None)
    assert plan.new_ca == "no valid CA" and plan.sign_with == "current" and plan.new_serving is not None
    assert not plan.keep_previous_ca


def test_a_fresh_pair_is_kept() -> None:
    plan = plan_certificates(NOW, SETTINGS, NAMES, cert(-10, 990), None, cert(-1, 99, "current", NAMES))
    assert (plan.new_ca, plan.new_serving, plan.sign_with) == (None, None, "current")


def test_a_serving_certificate_is_renewed_within_renew_before_not_earlier() -> None:
    ca = cert(-500, 500)
    assert plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-79, 21, "current", NAMES)).new_serving is None
    plan = plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-80, 20, "current", NAMES))
    assert plan.new_serving is not None and "renewBeforeHours" in plan.new_serving and plan.new_ca is None


def test_changed_service_names_or_a_foreign_issuer_reissue_the_serving_certificate() -> None:
    ca = cert(-500, 500)
    assert "DNS names" in str(plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-1, 99, "current", ("x",)))
                              .new_serving)
    assert "not signed" in str(plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-1, 99, None, NAMES))
                               .new_serving)


def test_a_ca_near_expiry_is_renewed_but_the_old_one_signs_until_the_new_one_propagated() -> None:
    """Given a CA within caRenewBeforeHours, Then a new CA is made, the old one stays trusted (previous) and
    keeps signing (no new serving certificate yet); 10 minutes later the new CA signs a new one."""
    old = cert(-900, 100)
    plan = plan_certificates(NOW, SETTINGS, NAMES, old, None, cert(-1, 99, "current", NAMES))
    assert plan.new_ca is not None and plan.keep_previous_ca and plan.sign_with == "previous"
    # The serving certificate was signed by what is now the previous CA: the issuer label moved with it.
    later = NOW + dt.timedelta(minutes=5)
    new_ca = CertState(NOW - dt.timedelta(minutes=5), NOW + 1000 * HOUR)
    assert plan_certificates(later, SETTINGS, NAMES, new_ca, old, cert(-1, 99, "previous", NAMES)).new_serving is None
    after = NOW + dt.timedelta(minutes=10)
    plan = plan_certificates(after, SETTINGS, NAMES, new_ca, old, cert(-1, 99, "previous", NAMES))
    assert plan.sign_with == "current" and "not signed by the current CA" in str(plan.new_serving)
    assert plan.keep_previous_ca  # still trusted through the overlap


def test_an_expired_previous_ca_leaves_the_bundle() -> None:
    plan = plan_certificates(NOW, SETTINGS, NAMES, cert(-300, 700), cert(-1000, -1), cert(-1, 99, "current", NAMES))
    assert not plan.keep_previous_ca and plan.new_serving is None


def test_a_serving_certificate_cut_short_by_its_ca_renews_at_half_life_not_on_every_reconcile() -> None:
    """A certificate capped at its CA's expiry (10 hours of life, under renewBeforeHours) is kept for half its
    life: it is not re-issued on every resync."""
    ca = cert(-500, 500)
    assert plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-1, 9, "current", NAMES)).new_serving is None
    assert plan_certificates(NOW, SETTINGS, NAMES, ca, None, cert(-6, 4, "current", NAMES)).new_serving is not None


def _data(material: TlsMaterial) -> tuple[dict[str, str], dict[str, str]]:
    ca = {CA_CERT_KEY: material.ca.cert_pem, CA_KEY_KEY: material.ca.key_pem}
    if material.previous_ca is not None:
        ca |= {PREVIOUS_CA_CERT_KEY: material.previous_ca.cert_pem, PREVIOUS_CA_KEY_KEY: material.previous_ca.key_pem}
    return ca, {"tls.crt": material.serving.cert_pem, "tls.key": material.serving.key_pem}


def _load(pem: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem.encode())


def test_ensure_issues_once_keeps_what_is_valid_and_rotates_the_ca_with_an_overlap() -> None:
    """Given empty Secrets, When ensured, Then a CA and a serving certificate for the Service names signed by it;
    ensured again with what the Secrets then hold, Then nothing changes (the apply is a no-op); near the CA's
    expiry a new CA joins the bundle, and once propagated it signs a new serving certificate."""
    first = ensure_certificates(NOW, SETTINGS, NAMES, {}, {}, "kct ns/tr")
    assert len(first.events) == 2 and first.previous_ca is None
    serving = _load(first.serving.cert_pem)
    serving.verify_directly_issued_by(_load(first.ca.cert_pem))
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert tuple(sans.get_values_for_type(x509.DNSName)) == NAMES
    assert serving.not_valid_after_utc == NOW + 100 * HOUR

    again = ensure_certificates(NOW + HOUR, SETTINGS, NAMES, *_data(first), "kct ns/tr")
    assert again.events == () and again.ca == first.ca and again.serving == first.serving

    near_expiry = NOW + 850 * HOUR  # the CA has 150 hours left, below caRenewBeforeHours (200)
    rotated = ensure_certificates(near_expiry, SETTINGS, NAMES, *_data(first), "kct ns/tr")
    assert rotated.previous_ca == first.ca and rotated.ca != first.ca
    assert rotated.bundle == rotated.ca.cert_pem + first.ca.cert_pem
    # the old serving certificate had expired by then: re-issued, by the old CA while the new one propagates
    _load(rotated.serving.cert_pem).verify_directly_issued_by(_load(first.ca.cert_pem))

    propagated = ensure_certificates(near_expiry + dt.timedelta(minutes=11), SETTINGS, NAMES, *_data(rotated), "x")
    _load(propagated.serving.cert_pem).verify_directly_issued_by(_load(rotated.ca.cert_pem))
    assert propagated.previous_ca == first.ca and propagated.ca == rotated.ca


def test_garbage_in_the_secrets_is_replaced() -> None:
    material = ensure_certificates(NOW, SETTINGS, NAMES, {CA_CERT_KEY: "junk", CA_KEY_KEY: "junk"},
                                   {"tls.crt": "junk"}, "kct ns/tr")
    _load(material.serving.cert_pem).verify_directly_issued_by(_load(material.ca.cert_pem))


def test_a_key_that_does_not_match_its_certificate_is_no_pair() -> None:
    first = ensure_certificates(NOW, SETTINGS, NAMES, {}, {}, "kct ns/tr")
    other = ensure_certificates(NOW, SETTINGS, NAMES, {}, {}, "kct ns/tr")
    mixed = {"tls.crt": first.serving.cert_pem, "tls.key": other.serving.key_pem}
    again = ensure_certificates(NOW, SETTINGS, NAMES, _data(first)[0], mixed, "kct ns/tr")
    assert again.serving != first.serving and again.ca == first.ca
