"""Certificates rotate under load with no lost push: a receiver process serving HTTPS in front of a real Kafka
broker, senders pushing continuously, the serving certificate replaced twice on disk (as kubelet replaces a
mounted Secret's files) while they push.

Rotation 1 keeps the CA (a renewal); rotation 2 moves to a new CA the way the operator does it
(kct.render.certificates): the senders' trust bundle gets the new CA first (the old one stays: the overlap),
then the receiver's files get a certificate the new CA signed. Half the senders open a connection per push
(each push a new handshake, so they meet every certificate), half keep theirs open (open connections keep the
certificate they began with). Everything runs on loopback, on free ports, with a broker of the stack's Kafka
release (no plugin) started as tests/e2e/test_receiver_slow_senders_e2e.py starts it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import ssl
import subprocess
import sys
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from helpers import stop_process
from script_loader import load_script
from waiting import eventually, eventually_async

from kct.render.certificates import KeyPair, issue_ca, issue_serving

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SLOW = load_script(REPO / "bench" / "receiver_slow_senders.py")
HOST = "127.0.0.1"
TOKEN = "rotation-token"
SENDERS = 8
# Pushes every sender makes after the second rotation was seen served, so new and kept connections both push
# under the final certificate before the run ends.
AFTER_LAST_ROTATION = 20


@dataclass
class Tally:
    acked: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    attempted: int = 0


def _write_pair(directory: Path, pair: KeyPair) -> None:
    """Replace the files as kubelet does a Secret volume's: each file swapped whole (rename), one after the other
    (the receiver must cope with a certificate whose key is not there yet)."""
    for name, text in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        staged = directory / f".{name}.new"
        staged.write_text(text)
        os.replace(staged, directory / name)


def _serial(pair: KeyPair) -> int:
    return x509.load_pem_x509_certificate(pair.cert_pem.encode()).serial_number


async def _served_serial(port: int, trust: ssl.SSLContext) -> int:
    _, writer = await asyncio.open_connection(HOST, port, ssl=trust)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der).serial_number


async def _until_served(port: int, trust: ssl.SSLContext, pair: KeyPair, timeout_s: float = 30.0) -> None:
    """Wait until a new connection is served `pair`'s certificate (the receiver's reload check ran)."""
    async def served() -> bool:  # a new handshake each time
        return await _served_serial(port, trust) == _serial(pair)

    await eventually_async(served, timeout=timeout_s, interval=0.05, what="the receiver serving the new certificate")


@contextmanager
def _tls_receiver(workdir: Path, bootstrap: str, topic: str, port: int, tls_dir: Path) -> Iterator[None]:
    config = {
        "listen": {"host": HOST, "port": port, "tls": {
            "certFile": str(tls_dir / "tls.crt"), "keyFile": str(tls_dir / "tls.key"), "reloadIntervalMs": 200}},
        "auth": {"bearerTokenEnv": "KCT_RECEIVER_TOKEN"},
        "kafka": {"bootstrapServers": bootstrap, "topic": topic, "readinessIntervalMs": 500},
        "logging": {"level": "INFO", "format": "json"},
    }
    path = workdir / "receiver.json"
    path.write_text(json.dumps(config))
    env = dict(os.environ, KCT_RECEIVER_TOKEN=TOKEN, PYTHONPATH=str(REPO / "operator"))
    log = workdir / "receiver.log"
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "kct.cli", "receiver", "--config", str(path)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    def ready() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"https://{HOST}:{port}/readyz", timeout=2, context=unverified) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    try:
        eventually(ready, timeout=90, interval=0.2, what="the receiver ready")
        yield
        assert process.poll() is None, log.read_text()[-3000:]
    finally:
        stop_process(process)


async def _sender(port: int, trust: ssl.SSLContext, tally: Tally, stop: asyncio.Event, *, fresh: bool) -> None:
    """Push distinct records until `stop`; `fresh`: a new connection (handshake) per push."""
    connector = aiohttp.TCPConnector(ssl=trust, force_close=fresh, limit=1)
    url = f"https://{HOST}:{port}/v1/metrics"
    async with aiohttp.ClientSession(connector=connector) as session:
        while not stop.is_set():
            instance = uuid.uuid4().hex
            tally.attempted += 1
            headers = {"Content-Type": "application/x-protobuf", "Authorization": f"Bearer {TOKEN}",
                       "kct-client-instance-id": instance}
            try:
                async with session.post(url, data=SLOW._body(instance), headers=headers) as resp:
                    await resp.read()
                    if resp.status == 200:
                        tally.acked.append(instance)
                    else:
                        tally.failures[f"status {resp.status}"] += 1
            except (aiohttp.ClientError, OSError) as error:
                tally.failures[type(error).__name__ + ": " + str(error)[:120]] += 1


async def _run(port: int, tls_dir: Path, first_ca: KeyPair, renewed: KeyPair, new_ca: KeyPair,
               moved: KeyPair) -> tuple[Tally, dict[str, int]]:
    trust = ssl.create_default_context(cadata=first_ca.cert_pem)  # what the brokers trust: the published bundle
    tally, stop = Tally(), asyncio.Event()
    senders = [asyncio.create_task(_sender(port, trust, tally, stop, fresh=i % 2 == 0)) for i in range(SENDERS)]
    marks: dict[str, int] = {}

    async def pushes_after(count: int) -> None:
        target = len(tally.acked) + count
        await eventually_async(lambda: len(tally.acked) >= target or all(task.done() for task in senders),
                               timeout=120, interval=0.05, what=f"{count} more acknowledged pushes")

    try:
        await pushes_after(SENDERS * 10)
        marks["before_rotation_1"] = len(tally.acked)
        _write_pair(tls_dir, renewed)  # rotation 1: same CA
        await _until_served(port, trust, renewed)
        await pushes_after(SENDERS * 10)
        marks["before_rotation_2"] = len(tally.acked)
        # rotation 2: the new CA joins the bundle first (the old one stays: the overlap), then signs
        trust.load_verify_locations(cadata=new_ca.cert_pem)
        _write_pair(tls_dir, moved)
        await _until_served(port, trust, moved)
        marks["at_rotation_2_served"] = len(tally.acked)
        await pushes_after(SENDERS * AFTER_LAST_ROTATION)
    finally:
        stop.set()
        await asyncio.gather(*senders)
    marks["total"] = len(tally.acked)
    return tally, marks


def test_serving_certificate_rotates_twice_under_load_without_a_lost_push(tmp_path: Path) -> None:
    """Given senders pushing continuously over HTTPS to a receiver in front of Kafka, When the serving
    certificate is replaced by one from the same CA, then by one from a new CA (after the senders' bundle got
    it), Then no push fails, new connections were served each certificate, and every push answered 200 is a
    record on the topic."""
    now = dt.datetime.now(dt.UTC)
    names, ips = ("localhost",), (HOST,)
    first_ca, new_ca = issue_ca(now, 24, "kct-rotation-ca-1"), issue_ca(now, 48, "kct-rotation-ca-2")
    first = issue_serving(now, 1, names, first_ca, ip_addresses=ips)
    renewed = issue_serving(now, 2, names, first_ca, ip_addresses=ips)
    moved = issue_serving(now, 2, names, new_ca, ip_addresses=ips)
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    _write_pair(tls_dir, first)

    with SLOW.kafka_broker_on_free_ports(tmp_path) as bootstrap:
        topic = "kct-cert-rotation"
        SLOW.create_topic(bootstrap, topic)
        port = SLOW.free_port()
        with _tls_receiver(tmp_path, bootstrap, topic, port, tls_dir):
            tally, marks = asyncio.run(_run(port, tls_dir, first_ca, renewed, new_ca, moved))
        reloads = (tmp_path / "receiver.log").read_text().count("TLS certificate reloaded")

        acked = set(tally.acked)
        on_topic = SLOW.topic_keys(bootstrap, topic, acked)
        print(f"cert rotation: {tally.attempted} pushes attempted, {len(acked)} answered 200, "
              f"{len(acked & on_topic)} on the topic, failures {dict(tally.failures)}, marks {marks}, "
              f"reloads logged {reloads}")
        assert not tally.failures, dict(tally.failures)
        assert len(acked) == tally.attempted >= SENDERS * (20 + AFTER_LAST_ROTATION)
        assert marks["before_rotation_2"] > marks["before_rotation_1"]
        assert marks["total"] > marks["at_rotation_2_served"]
        assert reloads >= 2
        assert not acked - on_topic, f"{len(acked - on_topic)} acknowledged pushes are not on the topic"
