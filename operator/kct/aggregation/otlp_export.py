"""Sending a finished window's aggregates over OTLP/HTTP (protobuf), with bounded retries and counted failures.

An export must never stop the aggregation: Parquet is the record, the export a view of it. So a request is
tried `maxAttempts` times (connection errors, timeouts, 429 and 5xx; waits doubling from `backoffSeconds`,
capped), and a window whose request still failed is counted, logged and given up, the job going on. The
exporter's own counters ride in its next request, so the backend shows them once it is reachable again:

- `kct.aggregation.export.failures` - windows given up (and `kct.aggregation.export.requests.failed`);
- `kct.aggregation.export.series.dropped` - series over the per-window cap;
- `kct.aggregation.export.series` - series sent for the window (a gauge).

`ExportStatus` holds the same counts, the last error and the last window sent; the job writes it next to its
tables (`_export/status.json`) for the operator to surface, and logs each failure.

The HTTP client sits behind `MetricsSender` (one real implementation over urllib, and fakes in the tests).
"""

from __future__ import annotations

import logging
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final, Protocol

from opentelemetry.proto.metrics.v1 import metrics_pb2 as pb

from kct.aggregation.config import OtlpExportConfig
from kct.aggregation.otlp_metrics import WindowPoints, requests_for, window_points

__all__ = [
    "ExportError",
    "ExportStatus",
    "HttpSender",
    "MetricsSender",
    "WindowExporter",
]

log = logging.getLogger(__name__)

_MAX_BACKOFF_S: Final = 30.0
_RETRIED_STATUS: Final = frozenset({408, 429, 500, 502, 503, 504})


class ExportError(RuntimeError):
    """A request was not accepted; `retryable` says whether another attempt may succeed."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class MetricsSender(Protocol):
    """Posts one serialized ExportMetricsServiceRequest; raises ExportError when it is not accepted."""

    def send(self, body: bytes) -> None: ...


class HttpSender:
    """OTLP/HTTP with protobuf bodies over urllib (the driver needs nothing more)."""

    def __init__(self, cfg: OtlpExportConfig) -> None:
        self._url = cfg.endpoint
        self._headers = {**cfg.headers, "Content-Type": "application/x-protobuf"}
        self._timeout = cfg.timeout_seconds
        self._context = ssl.create_default_context(cafile=cfg.ca_file) if cfg.endpoint.startswith("https") else None

    def send(self, body: bytes) -> None:
        request = urllib.request.Request(self._url, data=body, headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                response.read()
        except urllib.error.HTTPError as error:
            detail = error.read(300).decode(errors="replace").strip()
            raise ExportError(f"{self._url}: HTTP {error.code} {detail}",
                              retryable=error.code in _RETRIED_STATUS) from error
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            raise ExportError(f"{self._url}: {getattr(error, 'reason', error)}", retryable=True) from error


@dataclass
class ExportStatus:
    """What the exporter did since the job started (the counters it also exports)."""

    windows_sent: int = 0
    windows_failed: int = 0
    requests_failed: int = 0
    series_sent: int = 0
    series_dropped: int = 0
    last_error: str = ""
    last_window_end_sent: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class WindowExporter:
    """Exports windows of client_metrics rows; keeps the status and its own cumulative counters."""

    def __init__(self, cfg: OtlpExportConfig, sender: MetricsSender | None = None, *,
                 sleep: Callable[[float], None] = time.sleep, clock_ns: Callable[[], int] = time.time_ns) -> None:
        self._cfg = cfg
        self._sender = sender if sender is not None else HttpSender(cfg)
        self._sleep = sleep
        self._clock_ns = clock_ns
        self._started_ns = clock_ns()
        self.status = ExportStatus()

    def export_rows(self, rows: Iterable[Mapping[str, Any]]) -> ExportStatus:
        """Send every window of `rows` (client_metrics rows, otlp_metrics.EXPORT_COLUMNS), oldest first. Never
        raises for the endpoint's sake: a window that fails after the retries is counted and skipped."""
        for window in window_points(rows, self._cfg):
            self._export_window(window)
        return self.status

    def _export_window(self, window: WindowPoints) -> None:
        self.status.series_dropped += window.dropped_series
        if window.dropped_series:
            log.warning("export: window ending %s: %d series of %d clients over the cap of %d dropped",
                        _iso(window.window_end_ns), window.dropped_series, window.dropped_clients,
                        self._cfg.max_series_per_window)
        requests = requests_for(window, self._cfg.resource_attributes, self._own_metrics(len(window.points)))
        for request in requests:
            error = self._send_with_retries(request.SerializeToString())
            if error is not None:
                self.status.windows_failed += 1
                self.status.last_error = error
                log.error("export: window ending %s given up (%d failed so far): %s",
                          _iso(window.window_end_ns), self.status.windows_failed, error)
                return
        self.status.windows_sent += 1
        self.status.series_sent += len(window.points)
        self.status.last_window_end_sent = _iso(window.window_end_ns)

    def _send_with_retries(self, body: bytes) -> str | None:
        """None when sent; else the last error, after at most `max_attempts` attempts."""
        delay = self._cfg.backoff_seconds
        for attempt in range(1, self._cfg.max_attempts + 1):
            try:
                self._sender.send(body)
                return None
            except ExportError as error:
                self.status.requests_failed += 1
                if not error.retryable or attempt == self._cfg.max_attempts:
                    return f"{error} (attempt {attempt} of {self._cfg.max_attempts})"
                log.warning("export: attempt %d of %d failed, retrying in %.1fs: %s",
                            attempt, self._cfg.max_attempts, delay, error)
            self._sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)
        return "no attempt made"  # max_attempts >= 1: not reached

    def _own_metrics(self, series: int) -> list[pb.Metric]:
        """The exporter's counters as of now (cumulative since the job started) and the window's series."""
        now = self._clock_ns()

        def counter(name: str, value: int, description: str) -> pb.Metric:
            metric = pb.Metric(name=name, unit="{window}" if "failures" in name else "{series}",
                               description=description)
            metric.sum.is_monotonic = True
            metric.sum.aggregation_temporality = pb.AGGREGATION_TEMPORALITY_CUMULATIVE
            metric.sum.data_points.add(start_time_unix_nano=self._started_ns, time_unix_nano=now, as_int=value)
            return metric

        gauge = pb.Metric(name="kct.aggregation.export.series", unit="{series}",
                          description="Series sent for the newest window")
        gauge.gauge.data_points.add(time_unix_nano=now, as_int=series)
        requests_failed = counter("kct.aggregation.export.requests.failed", self.status.requests_failed,
                                  "Export requests not accepted (each attempt)")
        requests_failed.unit = "{request}"
        return [
            counter("kct.aggregation.export.failures", self.status.windows_failed,
                    "Windows whose export was given up after the retries"),
            requests_failed,
            counter("kct.aggregation.export.series.dropped", self.status.series_dropped,
                    "Series not exported because a window reached maxSeriesPerWindow"),
            gauge,
        ]


def _iso(ns: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns / 1e9))
