"""Token rotation without restarts: the token file is re-read when it changes, the previous token is honoured
for a grace period. The file is updated the way kubelet updates a mounted Secret (a new directory, then an
atomic swap of the `..data` symlink the key's path points through)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ReceiverFactory, base_config, make_request

from kct.receiver.config import ConfigError, parse_receiver_config
from kct.receiver.tokens import BearerTokens, TokenFileError


class SecretVolume:
    """A directory laid out like a Secret volume: `token -> ..data/token`, `..data -> ..<version>`."""

    def __init__(self, root: Path, token: str) -> None:
        self.root = root
        self.version = 0
        root.mkdir(parents=True, exist_ok=True)
        self.write(token)
        (root / "token").symlink_to(Path("..data") / "token")

    @property
    def path(self) -> Path:
        return self.root / "token"

    def write(self, content: str) -> None:
        self.version += 1
        version = self.root / f"..v{self.version}"
        version.mkdir()
        (version / "token").write_text(content)
        link = self.root / "..data_tmp"
        link.symlink_to(version.name)
        os.replace(link, self.root / "..data")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rotated_file_is_picked_up_and_the_previous_token_honoured_for_the_grace_period(tmp_path: Path) -> None:
    """Given tokens read from a Secret-like file with a 300 s grace period, when the Secret changes, then within
    a second the new token is accepted, the old one too until 300 s after the change, and not after."""
    volume, clock = SecretVolume(tmp_path / "secret", "old-token"), Clock()
    tokens = BearerTokens.from_file(volume.path, grace_s=300, clock=clock)
    assert tokens.accepts(b"old-token") and not tokens.accepts(b"new-token")

    volume.write("new-token\n")
    clock.now += 1.0
    assert tokens.accepts(b"new-token")
    assert tokens.accepts(b"old-token")
    assert tokens.rotations == 1
    clock.now += 299.0
    assert tokens.accepts(b"old-token")
    clock.now += 1.0
    assert not tokens.accepts(b"old-token")
    assert tokens.accepts(b"new-token")
    assert not tokens.accepts(b"")


def test_an_unknown_token_triggers_an_early_check(tmp_path: Path) -> None:
    """Given a sender that already has the new token, when it pushes 0.2 s after the last check, then the file is
    re-read at once (not after the 1 s interval) and the push is accepted; and unknown tokens cannot make the
    receiver stat the file more than every 100 ms."""
    volume, clock = SecretVolume(tmp_path / "secret", "old-token"), Clock()
    tokens = BearerTokens.from_file(volume.path, grace_s=0, clock=clock)
    volume.write("new-token")
    clock.now += 0.05
    assert not tokens.accepts(b"new-token")  # within 100 ms of the last check: no re-read yet
    clock.now += 0.15
    assert tokens.accepts(b"new-token")
    assert not tokens.accepts(b"old-token")  # no grace period configured


def test_same_content_or_an_unreadable_file_changes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Given a rewrite with the same token, then no rotation; given the file emptied or removed, then the token
    in force stays (logged once, not per push), and a later valid token is picked up."""
    volume, clock = SecretVolume(tmp_path / "secret", "tok"), Clock()
    tokens = BearerTokens.from_file(volume.path, grace_s=60, clock=clock)
    volume.write("tok\n")
    clock.now += 1.0
    assert tokens.accepts(b"tok") and tokens.rotations == 0

    caplog.set_level(logging.WARNING, logger="kct.receiver.tokens")
    volume.write("   \n")
    for _ in range(5):
        clock.now += 1.0
        assert tokens.accepts(b"tok")
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 1
    (tmp_path / "secret" / "..data").unlink()
    clock.now += 1.0
    assert tokens.accepts(b"tok")

    volume.write("tok2")
    clock.now += 1.0
    assert tokens.accepts(b"tok2") and tokens.accepts(b"tok") and tokens.rotations == 1


def test_missing_or_empty_file_at_start_is_an_error(tmp_path: Path) -> None:
    """Given no token file, or an empty one, then the receiver cannot start: the error names the field."""
    with pytest.raises(TokenFileError, match=r"auth\.bearerTokenFile: cannot read"):
        BearerTokens.from_file(tmp_path / "absent", grace_s=0)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(TokenFileError, match="is empty"):
        BearerTokens.from_file(tmp_path / "empty", grace_s=0)


def test_config_takes_one_token_source() -> None:
    """Given both bearerTokenEnv and bearerTokenFile, then the config is refused naming both."""
    doc = {"kafka": {"bootstrapServers": "k:9092"}, "auth": {"bearerTokenEnv": "T", "bearerTokenFile": "/t"}}
    with pytest.raises(ConfigError, match=r"bearerTokenEnv and auth\.bearerTokenFile"):
        parse_receiver_config(doc)
    config = parse_receiver_config({"kafka": {"bootstrapServers": "k:9092"}, "auth": {"bearerTokenFile": "/t"}})
    assert config.auth.previous_token_grace_seconds == 300


async def test_receiver_accepts_the_rotated_token_without_restart(
    make_receiver: ReceiverFactory, tmp_path: Path
) -> None:
    """Given a running receiver reading its token from a Secret-like file, when the Secret is rotated, then a
    push with the new token is stored at once and one with the old token during the grace period; a wrong
    token is still 401."""
    volume = SecretVolume(tmp_path / "secret", "old-token")
    tokens = BearerTokens.from_file(volume.path, grace_s=300)
    receiver = await make_receiver(base_config(), token=tokens)
    body = make_request().SerializeToString()
    assert (await receiver.post(body, token="old-token")).status == 200
    assert (await receiver.post(body, token="new-token")).status == 401

    volume.write("new-token")
    await asyncio.sleep(0.15)  # duration: past the 100 ms floor between checks on unknown tokens
    assert (await receiver.post(body, token="new-token")).status == 200
    assert (await receiver.post(body, token="old-token")).status == 200
    assert (await receiver.post(body, token="other")).status == 401
    assert len(receiver.sink.records) == 3


def test_command_refuses_to_start_without_its_token_file(tmp_path: Path) -> None:
    """Given `auth.bearerTokenFile` naming a missing file, when `kct receiver` starts, then it exits 2 naming
    the file."""
    config = tmp_path / "receiver.yaml"
    config.write_text(f"kafka: {{bootstrapServers: 'k:9092'}}\nauth: {{bearerTokenFile: {tmp_path / 'nope'}}}\n")
    kct = Path(sys.executable).parent / "kct"
    out = subprocess.run([kct, "receiver", "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert "bearerTokenFile" in out.stderr and "nope" in out.stderr
