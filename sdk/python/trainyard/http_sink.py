"""HttpSink: metrics posted to the server's batch endpoint, for jobs outside Trainyard.

A job that runs on a laptop or under another scheduler has no agent to ship its metrics
file. With TRAINYARD_SERVER, TRAINYARD_TOKEN and TRAINYARD_RUN set (and no
TRAINYARD_METRICS_FILE), logger.sink_from_env picks this sink, which turns the logger's
encoded metrics-file lines into the JSON body of `POST /api/v1/runs/{run}/metrics`
(docs/api.md):

    {"rank": 0, "series": [{"key": "loss", "steps": [1, 2], "values": [2.3, "NaN"],
                            "times_ms": [...]}], "params": {"lr": 0.0003}}

"metrics" records become points, "params" records params, and "checkpoint" records the
points checkpoint/write_s (duration_ms / 1000 at the checkpoint's step) and
checkpoint/bytes, as the server does with records an agent forwards.

Like every sink it is called only by the logger: from its background thread (never
from log()), and from flush() and close(). Each write_lines call sends what it was
given, plus whatever is still kept from earlier failures, as one request (split only
past 1 MiB or 1,000 keys, the server's batch limits being 4 MiB and 1,000 keys).

Failures: a connection error, a 5xx or a 429 keeps the lines (up to the logger's cap,
100,000 by default; beyond it the oldest go, with one warning on stderr) and makes the
sink wait before trying again, exponentially longer, at most 30 s apart. Writes during
that wait only add to what is kept; the logger's thread calls retry_pending() at every
interval, so what is kept is sent once the server is back even if nothing new is
logged. Nothing ever sleeps on the training loop's behalf: a failed attempt returns at
once (a request waits at most its 10 s timeout, which only flush() could notice). A 4xx other than 429 means the server will never take this batch (a bad token,
an unknown run, a value it rejects): the batch is dropped with the server's message on
stderr. At close (interpreter exit) the logger gives the sink a deadline
(set_deadline); until then it retries, sleeping between tries, then reports on stderr
what it could not send.

HTTPS uses the default SSL context (the system's certificates), or the CA file named by
TRAINYARD_CA_CERT. Standard library only (http.client); proxies are not used.
"""

from __future__ import annotations

import collections
import http.client
import json
import random
import ssl
import sys
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any

from .logger import DEFAULT_MAX_BUFFERED_LINES
from .records import encode_float

# Per request: the server takes up to 4 MiB and 1,000 different keys (src/server/api.h,
# src/track/ingest.h); we stay well below the size so an estimate is safe.
MAX_REQUEST_BYTES = 1 << 20
MAX_KEYS_PER_REQUEST = 1000
INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
REQUEST_TIMEOUT_S = 10.0
# The same refusal (status and message) is printed at most this often.
REFUSAL_REPEAT_S = 60.0

_USER_AGENT = "trainyard-python-sdk"
_NON_FINITE = ("NaN", "Infinity", "-Infinity")


def default_backoff(failures: int) -> float:
    """Seconds to wait after `failures` failed tries in a row: 0.5, 1, 2, 4 ... at most
    30, each scaled by a random factor in [0.5, 1] so that the ranks of a job do not
    all retry at the same instant."""
    base = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2.0 ** min(max(failures, 1) - 1, 16))
    return base * random.uniform(0.5, 1.0)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _metric_value(value: object) -> object | None:
    """A JSON-ready metric value, or None if `value` is not one."""
    if _is_int(value):
        return value
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, str) and value in _NON_FINITE:
        return value
    return None


def record_points(record: object) -> tuple[list[tuple[str, int, object, int]],
                                           dict[str, Any]] | None:
    """A decoded metrics-file record as (points, params); points are (key, step, value,
    time_ms). None for a record the endpoint has no use for (an unknown kind, a
    malformed record)."""
    if not isinstance(record, dict):
        return None
    kind, time_ms = record.get("kind"), record.get("time_ms")
    if kind == "params":
        params = record.get("params")
        if not isinstance(params, dict):
            return None
        return [], {k: v for k, v in params.items()
                    if v is None or isinstance(v, (str, bool, int, float))}
    step = record.get("step")
    if not _is_int(time_ms) or not _is_int(step) or step < 0:
        return None
    points: list[tuple[str, int, object, int]] = []
    if kind == "metrics":
        metrics = record.get("metrics")
        if not isinstance(metrics, dict) or not metrics:
            return None
        for key, raw in metrics.items():
            value = _metric_value(raw)
            if value is None:
                return None
            points.append((key, step, value, time_ms))
        return points, {}
    if kind == "checkpoint":
        duration, size = record.get("duration_ms"), record.get("bytes")
        if _is_int(duration) and duration >= 0:
            points.append(("checkpoint/write_s", step, duration / 1000.0, time_ms))
        if _is_int(size) and size >= 0:
            points.append(("checkpoint/bytes", step, size, time_ms))
        return points, {}
    return None


class _ServerBusy(OSError):
    """The server answered 5xx or 429: try again later."""


class _Refused(Exception):
    """The server answered 4xx (not 429): this batch will never be taken."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class HttpSink:
    """Posts metrics-file lines to `{server}/api/v1/runs/{run}/metrics`.

    `backoff(failures)` gives the pause after that many failed tries in a row (tests
    pass their own); `max_buffered_lines` caps what is kept across failures.
    Raises ValueError for a bad server URL, token, run, rank or CA file.
    """

    def __init__(self, server: str, token: str, run: str, rank: int = 0, *,
                 ca_cert: str | None = None,
                 max_buffered_lines: int = DEFAULT_MAX_BUFFERED_LINES,
                 request_timeout_s: float = REQUEST_TIMEOUT_S,
                 max_request_bytes: int = MAX_REQUEST_BYTES,
                 backoff: Callable[[int], float] = default_backoff,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        server = server.strip()
        if "://" not in server:
            server = "http://" + server
        parts = urllib.parse.urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"TRAINYARD_SERVER: expected http(s)://HOST[:PORT], got {server!r}")
        try:
            port = parts.port
        except ValueError as e:
            raise ValueError(f"TRAINYARD_SERVER: {e} in {server!r}") from None
        token = token.strip()
        if not token or not token.isascii() or not token.isprintable() or " " in token:
            raise ValueError("TRAINYARD_TOKEN: must be a non-empty token of printable ASCII "
                             "without spaces")
        if not run:
            raise ValueError("TRAINYARD_RUN: must be a run (job) id or name")
        if not _is_int(rank) or rank < 0:
            raise ValueError(f"rank: must be an int >= 0, got {rank!r}")
        if max_buffered_lines < 1:
            raise ValueError(f"max_buffered_lines: must be >= 1, got {max_buffered_lines!r}")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}" \
                   f"/api/v1/runs/{urllib.parse.quote(run, safe='')}/metrics"
        self.run = run
        self.rank = rank
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = port
        self._path = urllib.parse.urlsplit(self.url).path
        self._context: ssl.SSLContext | None = None
        if self._https:
            try:
                self._context = ssl.create_default_context(cafile=ca_cert or None)
            except (OSError, ssl.SSLError) as e:
                raise ValueError(f"TRAINYARD_CA_CERT: cannot load {ca_cert!r}: {e}") from None
        self._headers = {"Authorization": f"Bearer {token}",
                         "Content-Type": "application/json",
                         "Accept": "application/json", "User-Agent": _USER_AGENT}
        self._max_lines = max_buffered_lines
        self._request_timeout_s = request_timeout_s
        self._max_request_bytes = max_request_bytes
        self._backoff = backoff
        self._sleep = sleep
        self._conn: http.client.HTTPConnection | None = None

        self._kept: collections.deque[bytes] = collections.deque()
        self._failures = 0                 # failed tries in a row
        self._next_try = 0.0               # time.monotonic() before which not to try
        self._last_error = ""
        self._deadline: float | None = None
        self._closed = False
        self._warned_drop = False
        self._last_refusal: tuple[int, str, float] | None = None
        # Counters, for tests and diagnosis.
        self.requests = 0
        self.sent_lines = 0
        self.refused_lines = 0
        self.dropped_lines = 0
        self.skipped_lines = 0

    # ---- the sink interface (one caller at a time: the logger serialises) ----

    def write_lines(self, lines: Sequence[bytes]) -> None:
        self._keep(lines)
        self._send(wait=self._deadline is not None)
        if self._closed:
            self._report_unsent()  # a late record after close(): one try, then say so

    def retry_pending(self) -> None:
        """Sends what is kept if the pause after the last failure is over; never waits."""
        if self._kept:
            self._send(wait=False)

    def set_deadline(self, deadline: float) -> None:
        """From now on, retry (sleeping between tries) until `deadline` (time.monotonic())
        and no longer: the logger is closing."""
        self._deadline = deadline

    def close(self) -> None:
        self._send(wait=self._deadline is not None)
        self._closed = True
        self._deadline = None  # a late record (written after close) still gets one try
        self._report_unsent()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @property
    def kept_lines(self) -> int:
        """Lines waiting to be sent (after failures)."""
        return len(self._kept)

    # ---- keeping and sending ----

    def _keep(self, lines: Sequence[bytes]) -> None:
        self._kept.extend(lines)
        over = len(self._kept) - self._max_lines
        if over > 0:
            for _ in range(over):
                self._kept.popleft()
            self.dropped_lines += over
            if not self._warned_drop:
                self._warned_drop = True
                why = f" ({self._last_error})" if self._last_error else ""
                print(f"trainyard: metrics are not reaching {self.url}{why}; dropping the "
                      f"oldest of {self._max_lines} kept lines",
                      file=sys.stderr, flush=True)

    def _send(self, wait: bool) -> None:
        """Sends what is kept, one request after another. After a failure: returns, or,
        with `wait`, sleeps and retries until the deadline."""
        while self._kept:
            now = time.monotonic()
            deadline = self._deadline
            if deadline is not None and now >= deadline:
                # Said here rather than in close(), which may not get its turn in time.
                self._report_unsent()
                return
            if now < self._next_try:
                if not wait:
                    return
                self._sleep(self._next_try - now if deadline is None
                            else min(self._next_try, deadline) - now)
                continue
            timeout = self._request_timeout_s
            if deadline is not None:
                timeout = max(0.01, min(timeout, deadline - now))
            try:
                body, count = self._next_body()
                if body is None:
                    self._forget(count)
                    self.skipped_lines += count
                    continue
                self._post(body, timeout)
            except _Refused as e:
                self._forget(count)
                self.refused_lines += count
                self._failures = 0  # the server is up; it just will not take these
                self._report_refusal(e, count)
                continue
            except Exception as e:  # noqa: BLE001 - whatever it is, it must not reach
                # the training loop (flush() runs this in the caller's thread) nor end the
                # logger's thread; OSError and HTTPException are the expected ones.
                self._failures += 1
                self._next_try = time.monotonic() + max(0.0, self._backoff(self._failures))
                error = _describe(e)
                if self._failures == 1:
                    print(f"trainyard: cannot send metrics to {self.url} ({error}); keeping up "
                          f"to {self._max_lines} lines and retrying, at most "
                          f"{MAX_BACKOFF_S:g} s apart", file=sys.stderr, flush=True)
                self._last_error = error
                if not wait:
                    return
                continue
            self._forget(count)
            self.sent_lines += count
            if self._failures:
                print(f"trainyard: metrics reach {self.url} again", file=sys.stderr, flush=True)
            self._failures = 0
            self._next_try = 0.0

    def _forget(self, count: int) -> None:
        for _ in range(count):
            self._kept.popleft()

    def _next_body(self) -> tuple[bytes | None, int]:
        """The request body for the oldest kept lines, and how many lines it covers.
        The body is None when none of them has anything to send."""
        series: dict[str, dict[str, list[object] | str]] = {}
        params: dict[str, Any] = {}
        size = 0
        count = 0
        for line in self._kept:
            try:
                decoded = record_points(json.loads(line))
            except ValueError:  # not JSON (or bytes that are not UTF-8)
                decoded = None
            if decoded is not None:
                points, record_params = decoded
                new_keys = {p[0] for p in points} - series.keys()
                # A point costs its share of the line plus its repeated step and time.
                cost = len(line) + 48 * len(points)
                if count and (len(series) + len(new_keys) > MAX_KEYS_PER_REQUEST or
                              size + cost > self._max_request_bytes):
                    break
                size += cost
                for key, step, value, time_ms in points:
                    s = series.get(key)
                    if s is None:
                        s = series[key] = {"key": key, "steps": [], "values": [],
                                           "times_ms": []}
                    s["steps"].append(step)    # type: ignore[union-attr]
                    s["values"].append(value)  # type: ignore[union-attr]
                    s["times_ms"].append(time_ms)  # type: ignore[union-attr]
                params.update(record_params)
            count += 1
        if not series and not params:
            return None, count
        body = {"rank": self.rank, "series": list(series.values()), "params": params}
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii"), count

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port,
                                                         timeout=timeout,
                                                         context=self._context)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port,
                                                        timeout=timeout)
        self._conn.timeout = timeout
        if self._conn.sock is not None:
            self._conn.sock.settimeout(timeout)
        return self._conn

    def _post(self, body: bytes, timeout: float) -> None:
        """One request. Raises _Refused on a 4xx other than 429, OSError or HTTPException
        on a failure worth retrying (a 5xx or 429 becomes an OSError)."""
        for _ in range(2):
            conn = self._connection(timeout)
            reused = conn.sock is not None
            self.requests += 1
            try:
                conn.request("POST", self._path, body=body, headers=self._headers)
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self._conn = None
                # A kept-alive connection the server closed meanwhile fails at once:
                # try again on a new one before calling it a failure.
                if reused and isinstance(e, (http.client.RemoteDisconnected,
                                             ConnectionResetError, BrokenPipeError)):
                    continue
                raise
            status = response.status
            if 200 <= status < 300:
                return
            message = _error_message(data, response.reason)
            if status == 429 or status >= 500:
                raise _ServerBusy(f"HTTP {status}: {message}")
            raise _Refused(status, message)
        raise OSError("the server closed the connection twice")  # pragma: no cover

    # ---- reporting ----

    def _report_refusal(self, e: _Refused, count: int) -> None:
        now = time.monotonic()
        last = self._last_refusal
        if last is not None and last[:2] == (e.status, e.message) and \
                now - last[2] < REFUSAL_REPEAT_S:
            return
        self._last_refusal = (e.status, e.message, now)
        print(f"trainyard: the server refused {count} metrics lines for run {self.run} "
              f"(HTTP {e.status}): {e.message}; dropped them", file=sys.stderr, flush=True)

    def _report_unsent(self) -> None:
        if self._kept:
            print(f"trainyard: {len(self._kept)} metrics lines were not sent to {self.url} "
                  f"({self._last_error or 'out of time'})", file=sys.stderr, flush=True)
            self.dropped_lines += len(self._kept)
            self._kept.clear()


def _describe(e: BaseException) -> str:
    if isinstance(e, _ServerBusy):
        return str(e)
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _error_message(data: bytes, reason: str) -> str:
    """The server's {"error": ...}, else the start of the body, else the reason."""
    try:
        decoded = json.loads(data)
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            return decoded["error"]
    except ValueError:
        pass
    text = data[:200].decode("utf-8", "replace").strip()
    return text or reason or "no message"
