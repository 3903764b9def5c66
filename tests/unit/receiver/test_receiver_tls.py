"""TLS on the listener: reload without restart, min version, and whose identity a push carries (mTLS vs token)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import ssl
from pathlib import Path

import aiohttp
import pytest
from conftest import PROTOBUF, TOKEN, ReceiverFactory, base_config, make_request
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kct.receiver.tls import certificate_identity
from kct.render.certificates import KeyPair, issue_ca, issue_serving

NOW = dt.datetime.now(dt.UTC)


def client_certificate(ca: KeyPair, common_name: str, dns_names: tuple[str, ...] = ()) -> KeyPair:
    """A client certificate (clientAuth) for `common_name` signed by `ca`."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(minutes=5)).not_valid_after(NOW + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                                        critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM).decode(), key_pem)


def write_pair(directory: Path, name: str, pair: KeyPair) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    cert.write_text(pair.cert_pem)
    key.write_text(pair.key_pem)
    return cert, key


def serving(ca: KeyPair) -> KeyPair:
    return issue_serving(NOW, 1, ("localhost",), ca, ip_addresses=("127.0.0.1",))


def client_context(*cas: KeyPair, pair: KeyPair | None = None, tmp: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata="".join(ca.cert_pem for ca in cas))
    if pair is not None:
        assert tmp is not None
        tmp.mkdir()
        cert, key = write_pair(tmp, "client", pair)
        ctx.load_cert_chain(str(cert), str(key))
    return ctx


async def served_certificate(port: int, ctx: ssl.SSLContext) -> x509.Certificate:
    """The certificate a new connection is served."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der)


def test_identity_is_the_cn_else_a_dns_san_and_the_allow_list_checks_both() -> None:
    cert = {"subject": ((("commonName", "broker-1"),),), "subjectAltName": (("DNS", "b1.kafka"), ("IP", "1.2.3.4"))}
    assert certificate_identity(cert) == "broker-1"
    assert certificate_identity(cert, ("b1.kafka",)) == "broker-1"
    assert certificate_identity(cert, ("broker-2",)) is None
    assert certificate_identity({"subject": (), "subjectAltName": (("DNS", "b1.kafka"),)}) == "b1.kafka"
    assert certificate_identity(None) is None and certificate_identity({}) is None


async def test_a_rotated_certificate_is_served_to_new_connections_without_restart(
    tmp_path: Path, make_receiver: ReceiverFactory
) -> None:
    """Given a receiver serving a certificate from CA 1, When the files are replaced by one from CA 2 and the
    reloader's check runs, Then new connections get the new certificate, a push over them succeeds, and an
    unchanged file is not reloaded again."""
    ca1, ca2 = issue_ca(NOW, 10, "ca-1"), issue_ca(NOW, 10, "ca-2")
    first = serving(ca1)
    cert, key = write_pair(tmp_path, "tls", first)
    config = base_config(listen={"host": "127.0.0.1", "port": 0, "tls": {"certFile": str(cert), "keyFile": str(key)}})
    receiver = await make_receiver(config)
    port = receiver.server.port
    assert port is not None and receiver.server.tls_reloader is not None
    trust_both = client_context(ca1, ca2)
    assert (await served_certificate(port, trust_both)).serial_number == \
        x509.load_pem_x509_certificate(first.cert_pem.encode()).serial_number

    second = serving(ca2)
    write_pair(tmp_path, "tls", second)
    assert receiver.server.tls_reloader.reload_if_changed()
    assert not receiver.server.tls_reloader.reload_if_changed()
    assert (await served_certificate(port, trust_both)).serial_number == \
        x509.load_pem_x509_certificate(second.cert_pem.encode()).serial_number
    async with aiohttp.ClientSession() as session, session.post(
            f"https://127.0.0.1:{port}/v1/metrics", data=make_request().SerializeToString(),
            headers={"Content-Type": PROTOBUF, "Authorization": f"Bearer {TOKEN}"}, ssl=client_context(ca2)) as resp:
        assert resp.status == 200


@pytest.mark.parametrize("staging", ["memory files", "temporary directory"])
async def test_a_half_written_pair_keeps_the_old_certificate_until_the_pair_matches(
    tmp_path: Path, make_receiver: ReceiverFactory, monkeypatch: pytest.MonkeyPatch, staging: str
) -> None:
    """Given a new certificate whose key has not been written yet, Then the check keeps the old pair (no
    reload) and new connections are still served the old certificate; once the key is there, the new one is
    loaded and served. The pair is staged in memory files on Linux, else in a private temporary directory."""
    if staging == "temporary directory":
        monkeypatch.delattr(os, "memfd_create")
    ca = issue_ca(NOW, 10, "ca")
    old = serving(ca)
    cert, key = write_pair(tmp_path, "tls", old)
    config = base_config(listen={"host": "127.0.0.1", "port": 0, "tls": {"certFile": str(cert), "keyFile": str(key)}})
    receiver = await make_receiver(config)
    reloader, port = receiver.server.tls_reloader, receiver.server.port
    assert reloader is not None and port is not None
    new = serving(ca)
    cert.write_text(new.cert_pem)
    assert not reloader.reload_if_changed()
    assert (await served_certificate(port, client_context(ca))).serial_number == _serial(old)
    key.write_text(new.key_pem)
    assert reloader.reload_if_changed() and reloader.reloads == 1
    assert (await served_certificate(port, client_context(ca))).serial_number == _serial(new)


def _serial(pair: KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert_pem.encode()).serial_number


async def test_min_version_refuses_older_clients(tmp_path: Path, make_receiver: ReceiverFactory) -> None:
    ca = issue_ca(NOW, 10, "ca")
    cert, key = write_pair(tmp_path, "tls", serving(ca))
    config = base_config(listen={"host": "127.0.0.1", "port": 0, "tls": {
        "certFile": str(cert), "keyFile": str(key), "minVersion": "TLSv1.3"}})
    receiver = await make_receiver(config)
    assert receiver.server.port is not None
    old = client_context(ca)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    # the server's alert arrives as an SSL error or, when it closes first, as a reset
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await served_certificate(receiver.server.port, old)
    assert (await served_certificate(receiver.server.port, client_context(ca))) is not None


async def test_with_mtls_the_certificate_is_the_principal_and_the_header_cannot_override_it(
    tmp_path: Path, make_receiver: ReceiverFactory
) -> None:
    """Given mTLS in `request` mode allowing subject alice, When a client without a certificate connects,
    Then /healthz answers (probes present none) but its push is refused 401; bob's certificate is refused 401;
    alice's push claiming `kct-principal: User:mallory` is stored as alice's, and alice's quota applies."""
    ca = issue_ca(NOW, 10, "ca")
    cert, key = write_pair(tmp_path, "tls", serving(ca))
    (tmp_path / "client-ca.crt").write_text(ca.cert_pem)
    config = base_config(
        listen={"host": "127.0.0.1", "port": 0, "tls": {
            "certFile": str(cert), "keyFile": str(key), "clientCaFile": str(tmp_path / "client-ca.crt"),
            "clientCertificate": "request", "allowedSubjects": ["alice"]}},
        quotas={"windowCount": 2, "overrides": [{"user": "alice", "pushRate": 1.0}]},
    )
    receiver = await make_receiver(config, token=None)
    url = f"https://127.0.0.1:{receiver.server.port}"
    body = make_request().SerializeToString()
    headers = {"Content-Type": PROTOBUF, "kct-principal": "User:mallory"}
    alice = client_context(ca, pair=client_certificate(ca, "alice"), tmp=tmp_path / "a")
    async with aiohttp.ClientSession() as session:
        anonymous = client_context(ca)
        async with session.get(f"{url}/healthz", ssl=anonymous) as resp:
            assert resp.status == 200
        async with session.post(f"{url}/v1/metrics", data=body, headers=headers, ssl=anonymous) as resp:
            assert resp.status == 401
        async with session.get(f"{url}/v1/clients", ssl=anonymous) as resp:
            assert resp.status == 401
        bob = client_context(ca, pair=client_certificate(ca, "bob"), tmp=tmp_path / "b")
        async with session.post(f"{url}/v1/metrics", data=body, headers=headers, ssl=bob) as resp:
            assert resp.status == 401
        statuses = []
        for _ in range(2):
            async with session.post(f"{url}/v1/metrics", data=body, headers=headers, ssl=alice) as resp:
                statuses.append(resp.status)
    assert statuses == [200, 429]  # alice's quota, not mallory's (who has none)
    assert len(receiver.sink.records) == 1
    principals = [value for name, value in receiver.sink.records[0].headers if name == "principal"]
    assert principals == [b"User:alice"]


async def test_without_any_authentication_a_principal_header_is_not_believed(make_receiver: ReceiverFactory) -> None:
    """Given no token and no mTLS, When a push claims `kct-principal: User:alice` under alice's 1/s quota, Then
    the quota does not apply (both pushes pass) and the record carries no principal."""
    config = base_config(quotas={"windowCount": 2, "overrides": [{"user": "alice", "pushRate": 1.0}]})
    receiver = await make_receiver(config, token=None)
    body = make_request().SerializeToString()
    statuses = [(await receiver.post(body, token=None, headers={"kct-principal": "User:alice"})).status
                for _ in range(2)]
    assert statuses == [200, 200]
    assert all(name != "principal" for record in receiver.sink.records for name, _ in record.headers)
