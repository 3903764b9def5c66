"""Why a push is refused: one exception per HTTP answer, each carrying a reason label for the metrics.

    ValueError
     └── PushRejected                 status, reason (metric label), message (for the sender)
          ├── BadRequest              400  malformed body, bad header, nothing valid in it
          ├── Unauthorized            401  missing/wrong bearer token
          ├── RequestTimeout          408  a request's head or body did not arrive in time
          ├── PayloadTooLarge         413  compressed or decompressed size above the limits
          ├── UnsupportedMediaType    415  content type or content encoding we do not speak
          ├── TooManyRequests         429  push-interval rate limit or quota throttle (Retry-After)
          └── Unavailable             503  overloaded, Kafka down/slow, draining (Retry-After)

Everything the pipeline raises for a sender's mistake is a `PushRejected`; anything else is a bug and
answers 500.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "PayloadTooLarge",
    "PushRejected",
    "RequestTimeout",
    "TooManyRequests",
    "Unauthorized",
    "Unavailable",
    "UnsupportedMediaType",
]


class PushRejected(ValueError):
    status: int = 400

    def __init__(self, reason: str, message: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retry_after_s = retry_after_s


class BadRequest(PushRejected):
    status = 400


class Unauthorized(PushRejected):
    status = 401


class RequestTimeout(PushRejected):
    status = 408


class PayloadTooLarge(PushRejected):
    status = 413


class UnsupportedMediaType(PushRejected):
    status = 415


class TooManyRequests(PushRejected):
    status = 429


class Unavailable(PushRejected):
    status = 503
