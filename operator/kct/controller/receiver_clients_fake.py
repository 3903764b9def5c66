"""An in-memory `ReceiverClientsSource` for unit tests: the ready pods of each receiver, its token, and what
each pod answers (a document, or the exception it raises). A test changes them between reads to play a
replica restarting, a pod going away or a registry refilling; it records every pod asked."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kct.controller.receiver_clients import ReceiverRef

__all__ = ["FakeReceiverClients"]


class FakeReceiverClients:
    def __init__(self) -> None:
        self.pods: dict[str, list[str]] = {}  # receiver key (namespace/name) -> ready pods
        self.tokens: dict[str, str] = {}  # receiver key -> token
        self.answers: dict[tuple[str, str], Mapping[str, Any] | Exception] = {}  # (receiver key, pod)
        self.asked: list[tuple[str, str, str | None]] = []

    def ready_pods(self, receiver: ReceiverRef) -> list[str]:
        return list(self.pods.get(receiver.key, []))

    def read_token(self, receiver: ReceiverRef) -> str | None:
        if receiver.token_secret is None:
            return None
        try:
            return self.tokens[receiver.key]
        except KeyError:
            raise LookupError(f"Secret {receiver.namespace}/{receiver.token_secret[0]} not found") from None

    def clients_document(self, receiver: ReceiverRef, pod: str, token: str | None) -> Mapping[str, Any]:
        self.asked.append((receiver.key, pod, token))
        answer = self.answers.get((receiver.key, pod))
        if answer is None:
            raise ConnectionError(f"pod {pod}: 503 no endpoints available")
        if isinstance(answer, Exception):
            raise answer
        return answer
