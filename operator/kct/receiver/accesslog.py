"""Access-log lines for the pushes the lean ingest path answers, as aiohttp writes them for everything else.

With `logging.accessLog` on, aiohttp logs each request it serves (other routes, and the unusual requests
the lean path hands over) through its `AccessLogger` on the `aiohttp.access` logger. The plain pushes never
reach aiohttp's request machinery, so the lean path logs them itself, through the same `AccessLogger` and
logger: one format (aiohttp's default, `%a %t "%r" %s %b "%{Referer}i" "%{User-Agent}i"`) and the same
`extra` fields (remote_address, request_start_time, first_request_line, response_status, response_size,
request_header) for every line, whichever path answered. An operator's log pipeline sees one access log.

Nothing here runs with the access log off (the default): the lean path then does not even build the
small request view.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

from aiohttp import HttpVersion11, web
from aiohttp.web_log import AccessLogger
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["PushAccessLog"]

_ROUTE = "/v1/metrics"


@dataclass(frozen=True, slots=True)
class _RequestView:
    """What aiohttp's AccessLogger reads of a request (the lean path accepts one request line only)."""

    remote: str | None
    headers: CIMultiDictProxy[str]
    method: str = "POST"
    path_qs: str = _ROUTE
    version: object = HttpVersion11


@dataclass(frozen=True, slots=True)
class _ResponseView:
    """What aiohttp's AccessLogger reads of a response. `body_length` is, as aiohttp counts it for `%b`, every
    byte written for the response: status line and headers included."""

    status: int
    body_length: int


class PushAccessLog:
    """Writes one aiohttp-format access-log line per push answered by the lean path."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = AccessLogger(logger or logging.getLogger("aiohttp.access"), AccessLogger.LOG_FORMAT)

    def push(self, remote: str | None, headers: Mapping[str, str], status: int, sent_bytes: int,
             elapsed_s: float) -> None:
        """One answered push: the peer's address, the request headers, the status, the bytes written for the
        answer (head and body, as aiohttp counts them), and the seconds from the request's arrival to its
        answer (the line's time is the arrival, as in aiohttp's lines)."""
        if not self._logger.enabled:
            return
        request = _RequestView(remote, CIMultiDictProxy(CIMultiDict(headers)))
        # The views carry exactly the attributes the default format reads (a test holds the two paths' lines
        # and fields alike).
        self._logger.log(cast(web.BaseRequest, request), cast(web.StreamResponse, _ResponseView(status, sent_bytes)),
                         elapsed_s)
