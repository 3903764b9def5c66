"""The bearer tokens a push may present: fixed (from an environment variable), or read from a file and
re-read when it changes, so a token can be rotated without restarting receivers.

How a rotation reaches a running receiver: the operator mounts the token Secret as a file; some time after
the Secret changes, kubelet replaces the file (atomically, by swapping a symlink). The receiver notices by
`stat` (device, inode, size, modification time; a changed stat with the same content changes nothing):
at most once a second, and at once (at most every 100 ms) when a push presents a token it does not know,
so a sender that already has the new token is refused for at most that long.

After a change the previous token stays valid for a grace period (`auth.previousTokenGraceSeconds`): each
broker's plugin reads its own copy of the Secret, which its kubelet updates on its own schedule (up to
about two minutes apart), and its pushes in between must not be refused. A file that becomes unreadable
or empty keeps the tokens in force (logged once), so a half-written Secret never locks senders out.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["BearerTokens", "TokenFileError"]

log = logging.getLogger(__name__)

CHECK_INTERVAL_S = 1.0
FAILURE_CHECK_INTERVAL_S = 0.1


class TokenFileError(ValueError):
    """The token file cannot be read or is empty."""


def _read_token(path: Path) -> str:
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"auth.bearerTokenFile: cannot read {str(path)!r}: {exc}") from None
    if not token:
        raise TokenFileError(f"auth.bearerTokenFile: {str(path)!r} is empty")
    return token


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)  # follows the symlink kubelet swaps
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class BearerTokens:
    """Checks a presented token (constant-time) against the current one and, during the grace period after
    a rotation, the previous one."""

    def __init__(
        self,
        token: str,
        *,
        path: Path | None = None,
        grace_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._current = token.encode()
        self._previous: bytes | None = None
        self._previous_until = 0.0
        self._path = path
        self._grace_s = grace_s
        self._clock = clock
        self._stat = _stat_key(path) if path is not None else None
        self._checked_at = clock()
        self._read_error: str | None = None
        self.rotations = 0

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, grace_s: float, clock: Callable[[], float] = time.monotonic
    ) -> BearerTokens:
        """Tokens from `path` (TokenFileError when it cannot be read or is empty: the receiver must not start
        without a token)."""
        p = Path(path)
        stat = _stat_key(p)
        tokens = cls(_read_token(p), path=p, grace_s=grace_s, clock=clock)
        tokens._stat = stat
        return tokens

    def accepts(self, presented: bytes) -> bool:
        now = self._clock()
        if self._path is not None and now - self._checked_at >= CHECK_INTERVAL_S:
            self._check(now)
        if self._matches(presented, now):
            return True
        # Unknown token: the file may have just changed (the sender saw the new Secret first).
        if self._path is not None and now - self._checked_at >= FAILURE_CHECK_INTERVAL_S:
            self._check(now)
            return self._matches(presented, now)
        return False

    def _matches(self, presented: bytes, now: float) -> bool:
        ok = hmac.compare_digest(presented, self._current)
        previous = self._previous
        if previous is not None:
            if now < self._previous_until:
                ok = hmac.compare_digest(presented, previous) or ok
            else:
                self._previous = None
        return ok

    def _check(self, now: float) -> None:
        assert self._path is not None
        self._checked_at = now
        stat = _stat_key(self._path)
        if stat == self._stat:
            return
        try:
            token = _read_token(self._path).encode()
        except TokenFileError as exc:
            if str(exc) != self._read_error:
                self._read_error = str(exc)
                log.warning("token file unreadable; the current token stays in force", extra={"error": str(exc)})
            return  # keep the old stat: retried on the next check
        self._stat = stat
        self._read_error = None
        if token == self._current:
            return
        self._previous, self._current = self._current, token
        self._previous_until = now + self._grace_s
        self.rotations += 1
        log.info("bearer token rotated", extra={"path": str(self._path),
                                                 "previous_token_grace_seconds": self._grace_s})
