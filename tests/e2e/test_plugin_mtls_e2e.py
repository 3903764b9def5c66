"""End to end: the broker plugin pushes to a `kct receiver` that requires mutual TLS.

`openssl` issues, in the test's directory, a CA, a receiver certificate for 127.0.0.1 and a broker (client)
certificate whose key is kept in openssl's own SEC1 form (`BEGIN EC PRIVATE KEY`). The receiver listens with
TLS and requires a client certificate its CA signed (listen.tls.clientCaFile); a broker of the newest release
in the version matrix, on free ports, runs the plugin with kct.telemetry.tls.ca.file/.cert.file/.key.file
(dev/stack/kafka_broker.PluginTls). A librdkafka producer pushes telemetry every second: its pushes arrive in the
receiver's topic with the broker's labels, while a client without a certificate cannot even complete a handshake.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import free_port, stop_process, unique
from plugin_versions_support import MATRIX, REPO, create_topic, kafka_broker, running_broker, subscribe
from preconditions import missing_precondition
from waiting import eventually

pytestmark = pytest.mark.e2e

RELEASE = MATRIX[-1]
TOKEN = "mtls-token"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path  # SEC1 (`BEGIN EC PRIVATE KEY`), as `openssl ec` writes it


def _openssl(workdir: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=workdir, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def _issue(workdir: Path) -> Certificates:
    """A CA and two certificates it signed, both for 127.0.0.1 (the receiver's name for the plugin's host check)."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")
    _openssl(workdir, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=kct-e2e-ca")
    (workdir / "leaf.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                      "extendedKeyUsage=serverAuth,clientAuth\n")
    for name in ("receiver", "broker"):
        _openssl(workdir, "req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN=kct-e2e-{name}")
        _openssl(workdir, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "2", "-extfile", "leaf.ext", "-out", f"{name}.crt")
    _openssl(workdir, "ec", "-in", "broker.key", "-out", "broker.sec1.key")
    assert "BEGIN EC PRIVATE KEY" in (workdir / "broker.sec1.key").read_text()
    return Certificates(workdir / "ca.crt", workdir / "receiver.crt", workdir / "receiver.key",
                        workdir / "broker.crt", workdir / "broker.sec1.key")


def _client_context(certs: Certificates, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if with_certificate:
        context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    return context


def _status(url: str, context: ssl.SSLContext) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


@contextlib.contextmanager
def _mtls_receiver(workdir: Path, bootstrap: str, topic: str, port: int,
                   certs: Certificates) -> Iterator[subprocess.Popen[bytes]]:
    """`kct receiver` on https://127.0.0.1:<port> requiring a client certificate of the CA, writing to `topic`."""
    config = {
        "listen": {"host": "127.0.0.1", "port": port,
                   "tls": {"certFile": str(certs.server_cert), "keyFile": str(certs.server_key),
                           "clientCaFile": str(certs.ca)}},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServersEnv": "KAFKA_BOOTSTRAP_SERVERS", "topic": topic, "deliveryTimeoutMs": 5000,
                  "readinessIntervalMs": 500, "readinessTimeoutMs": 1000},
        "logging": {"level": "INFO", "format": "json"},
    }
    path = workdir / "receiver.json"
    path.write_text(json.dumps(config))
    log = workdir / "receiver.log"
    env = dict(os.environ, KCT_RECEIVER_TOKEN=TOKEN, KAFKA_BOOTSTRAP_SERVERS=bootstrap,
               PYTHONPATH=str(REPO / "operator"))
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    ready_url = f"https://127.0.0.1:{port}/readyz"
    context = _client_context(certs, with_certificate=True)
    try:
        def ready_or_died() -> bool:
            return process.poll() is not None or _status(ready_url, context) == 200

        with contextlib.suppress(pytest.fail.Exception):
            eventually(ready_or_died, timeout=60, interval=0.2, what="the receiver ready")
        if process.poll() is not None or _status(ready_url, context) != 200:
            raise AssertionError(f"receiver not ready:\n{log.read_text()[-3000:]}")
        yield process
    finally:
        stop_process(process)


def _records_of(bootstrap: str, topic: str, client_id: str, wanted: int, producer_id: str) -> list[dict[str, str]]:
    """Produce with `producer_id` (so it keeps pushing) until `wanted` records of `client_id` are in `topic`;
    their headers."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": producer_id})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                         "enable.metrics.push": False, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[dict[str, str]] = []

    def enough() -> bool:
        producer.produce(f"{topic}-data", b"hello")
        producer.poll(0)
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            headers = {k: v.decode() for k, v in msg.headers() or []}
            if headers.get("client_id") == client_id:
                found.append(headers)
        return len(found) >= wanted

    try:
        eventually(enough, timeout=120, interval=0.0, what=f"{wanted} pushes of {client_id} in {topic}")
    finally:
        producer.flush(10)
        consumer.close()
    return found


def test_pushes_reach_the_topic_over_mutual_tls(tmp_path: Path) -> None:
    """Given a receiver that requires client certificates of a CA, and a broker whose plugin trusts that CA and
    presents a certificate it signed (PEM, SEC1 key),
    When a producer with a CLIENT_METRICS subscription runs,
    Then its pushes arrive in the receiver's topic with the broker's labels, the broker's log says the TLS
    material was loaded, and a client without a certificate is refused at the handshake."""
    if not (kafka_broker.libs_dir(RELEASE.version) / ".complete").exists():
        missing_precondition(f"Kafka {RELEASE.version} jars are not cached: run `make stack-install`")
    if shutil.which("openssl") is None:
        missing_precondition("`openssl` is not on PATH (it issues the test's certificates)")
    kafka_broker.install(RELEASE.version)  # rebuilds the plugin jar when its sources changed
    certs = _issue(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    tls = kafka_broker.PluginTls(ca_file=certs.ca, cert_file=certs.client_cert, key_file=certs.client_key)
    with running_broker(tmp_path, RELEASE, f"https://127.0.0.1:{port}/v1/metrics", RELEASE.plugin_class,
                        token_file, plugin_tls=tls) as bootstrap:
        prefix = unique("kct-mtls")
        subscribe(bootstrap, prefix, {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000",
                                      "match": f"client_id={prefix}-.*"})
        topic = f"{prefix}-telemetry"
        create_topic(bootstrap, topic)
        with _mtls_receiver(tmp_path, bootstrap, topic, port, certs):
            # a client that trusts the receiver but has no certificate does not get an answer at all
            assert _status(f"https://127.0.0.1:{port}/readyz", _client_context(certs, with_certificate=False)) == 0
            records = _records_of(bootstrap, topic, f"{prefix}-producer", 2, f"{prefix}-producer")
        log = (tmp_path / "logs" / "kafka.log").read_text(errors="replace")
    assert all(r.get("broker_id") and r.get("client_instance_id") for r in records), records
    assert "kct telemetry TLS material loaded from" in log
