"""Mutual TLS on the listener, and the `kct receiver` command's handling of a bad configuration."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from conftest import PROTOBUF, ReceiverFactory, base_config, make_request
from preconditions import missing_precondition

from kct.receiver.quota import QuotaLevel


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate with CN=alice, all signed by it."""
    if shutil.which("openssl") is None:
        missing_precondition("openssl is not installed (it makes the test PKI)")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "1", "-subj", "/CN=kct-test-ca", cwd=tmp_path)
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, cn in (("server", "127.0.0.1"), ("client", "alice")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                 "-subj", f"/CN={cn}", cwd=tmp_path)
        extra = ["-extfile", "san.ext"] if name == "server" else []
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "1", *extra, cwd=tmp_path)
    return tmp_path


async def test_mutual_tls_requires_a_client_certificate_and_uses_its_cn_as_quota_user(
    pki: Path, make_receiver: ReceiverFactory
) -> None:
    """Given TLS with a client CA and a <user alice> quota, when a client without a certificate connects,
    then the handshake fails; with alice's certificate the push is stored and alice's quota applies to it."""
    config = base_config(
        listen={"host": "127.0.0.1", "port": 0, "tls": {
            "certFile": str(pki / "server.pem"), "keyFile": str(pki / "server.key"),
            "clientCaFile": str(pki / "ca.pem")}},
        quotas={"windowCount": 2, "overrides": [{"user": "alice", "pushRate": 1.0}]},
    )
    receiver = await make_receiver(config, token=None)
    url = f"https://127.0.0.1:{receiver.server.port}/v1/metrics"
    body = make_request().SerializeToString()
    anonymous = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(url, data=body, headers={"Content-Type": PROTOBUF}, ssl=anonymous) as resp:
                await resp.read()
        alice = ssl.create_default_context(cafile=str(pki / "ca.pem"))
        alice.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        statuses = []
        for _ in range(2):
            async with session.post(url, data=body, headers={"Content-Type": PROTOBUF}, ssl=alice) as resp:
                statuses.append(resp.status)
    assert statuses == [200, 429]  # the second push exceeds alice's 1 push/s
    assert len(receiver.sink.records) == 1
    assert receiver.server.pipeline.quotas.resolve("push_rate", "alice", "").level == QuotaLevel.USER


def test_command_reports_invalid_configuration_and_exits_2(tmp_path: Path) -> None:
    """Given a config file with a misspelt key, when `kct receiver --config` runs, then it exits 2 and
    names the key; with a missing token variable it names that variable."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("kafka: {bootstrapServers: 'k:9092'}\nlimts: {}\n")
    kct = Path(sys.executable).parent / "kct"
    out = subprocess.run([kct, "receiver", "--config", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "limts" in out.stderr
    missing = tmp_path / "missing.yaml"
    missing.write_text("kafka: {bootstrapServers: 'k:9092'}\nauth: {bearerTokenEnv: KCT_SURELY_UNSET_TOKEN}\n")
    out = subprocess.run([kct, "receiver", "--config", str(missing)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "KCT_SURELY_UNSET_TOKEN" in out.stderr
