"""Batched, non-blocking metrics logging.

A MetricsLogger turns each call (log, log_params, checkpoint_saved) into one encoded
line in the caller's thread, appends it to an in-memory buffer and returns: the
training loop never waits on a file or the network. A background thread hands the
buffer to a MetricsSink every `flush_interval_s` seconds, or sooner once
`flush_points` metric values are waiting; `flush()` and interpreter exit (atexit) hand
it over too.

Where the lines go is the sink's business: FileSink appends to TRAINYARD_METRICS_FILE
(the agent tails it); an HTTP sink for the server's batch endpoint can be added later
behind the same two-method interface without touching the logging side.

Backpressure: if the sink stalls (a hung network file system, a full disk) the buffer
grows to `max_buffered_lines`; beyond that the oldest lines are dropped and counted
(`dropped_lines`), with one warning on stderr. Losing old metrics is better than
stalling or exhausting the memory of a training job.

Threading: every public method may be called from any thread. log() only takes a
short in-memory lock. flush() blocks until what was logged before it has been handed
to the sink (so it waits for a stalled sink, which is why it takes a timeout).
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from . import records


class MetricsSink(Protocol):
    """Where encoded lines go. Called from one thread at a time (the logger serialises)."""

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Delivers whole lines, in order; raises OSError on failure."""

    def close(self) -> None:
        """Releases resources; write_lines may not be called afterwards."""


class NullSink:
    """Discards lines: used when the job runs without TRAINYARD_METRICS_FILE."""

    def write_lines(self, lines: Sequence[bytes]) -> None:
        del lines

    def close(self) -> None:
        pass


class FileSink:
    """Appends lines to a file with one write() per line.

    One write per whole line (O_APPEND) means a reader tailing the file sees complete
    lines, except for the last one while it is being written; the agent relies on this.
    The file and its parent directory are created on first use.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o644)
        return self._fd

    def write_lines(self, lines: Sequence[bytes]) -> None:
        fd = self._open()
        for line in lines:
            view = memoryview(line)
            # A regular file takes the whole line in one write; the loop only matters
            # for a short write (e.g. disk full mid-line), which then raises next round.
            while view:
                written = os.write(fd, view)
                view = view[written:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch."""
    return time.time_ns() // 1_000_000


class MetricsLogger:
    """Buffers records and writes them to a sink from a background thread."""

    def __init__(self, sink: MetricsSink, *, flush_interval_s: float = 0.5,
                 flush_points: int = 1000, max_buffered_lines: int = 100_000,
                 clock_ms: Callable[[], int] = wall_clock_ms,
                 register_atexit: bool = True) -> None:
        if flush_interval_s <= 0:
            raise ValueError(f"flush_interval_s: must be > 0, got {flush_interval_s!r}")
        if flush_points < 1:
            raise ValueError(f"flush_points: must be >= 1, got {flush_points!r}")
        if max_buffered_lines < 1:
            raise ValueError(f"max_buffered_lines: must be >= 1, got {max_buffered_lines!r}")
        self._sink = sink
        self._flush_interval_s = flush_interval_s
        self._flush_points = flush_points
        self._max_buffered_lines = max_buffered_lines
        self._clock_ms = clock_ms

        # _buffer_lock guards the buffer and counters; it is never held during I/O.
        self._buffer_lock = threading.Lock()
        self._buffer: collections.deque[bytes] = collections.deque()
        self._pending_points = 0
        self._dropped_lines = 0
        self._warned_drop = False
        # _write_lock serialises draining + writing so lines reach the sink in order.
        self._write_lock = threading.Lock()
        self._write_errors = 0
        self._last_write_error: OSError | None = None

        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._register_atexit = register_atexit
        if register_atexit:
            atexit.register(self._close_at_exit)
        _live_loggers.add(self)

    # ---- recording (caller's thread; never blocks on I/O) ----

    def log(self, step: int, **metrics: object) -> None:
        """Records metric values at `step`. Raises ValueError on a bad key or value."""
        self.log_metrics(step, metrics)

    def log_metrics(self, step: int, metrics: Mapping[str, object]) -> None:
        """Like log(), with the metrics as a mapping (for keys such as "eval/loss")."""
        record = records.metrics_record(step, self._clock_ms(), metrics)
        self._append(records.encode_line(record), len(metrics))

    def log_params(self, params: Mapping[str, object]) -> None:
        """Records hyperparameters (scalars; nested dicts become dotted keys)."""
        record = records.params_record(self._clock_ms(), params)
        self._append(records.encode_line(record), 1)

    def checkpoint_saved(self, path: str, step: int, started_ms: int | None = None,
                         duration_ms: int | None = None, bytes: int | None = None,
                         **extra_ms: int | None) -> None:
        """Records that a complete checkpoint of `step` now exists at `path`."""
        # `bytes` shadows the builtin to keep the documented keyword; not used as a type here.
        record = records.checkpoint_record(self._clock_ms(), path, step, started_ms,
                                           duration_ms, bytes, **extra_ms)
        # A checkpoint record is what the control plane resumes from: send it promptly.
        self._append(records.encode_line(record), self._flush_points)

    def _append(self, line: bytes, points: int) -> None:
        warn = False
        with self._buffer_lock:
            closed = self._closed
            if not closed:
                self._buffer.append(line)
                self._pending_points += points
                over = len(self._buffer) - self._max_buffered_lines
                if over > 0:
                    for _ in range(over):
                        self._buffer.popleft()
                    self._dropped_lines += over
                    warn = not self._warned_drop
                    self._warned_drop = True
                if self._thread is None:
                    self._start_thread_locked()
            wake = self._pending_points >= self._flush_points
        if closed:
            # Late records (e.g. a checkpoint finishing during interpreter exit, after the
            # atexit flush) are written synchronously rather than lost.
            with self._write_lock:
                self._write_batch([line])
            return
        if warn:
            print(f"trainyard: metrics sink is not keeping up; dropping the oldest of "
                  f"{self._max_buffered_lines} buffered lines", file=sys.stderr, flush=True)
        if wake:
            self._wake.set()

    # ---- delivery ----

    def _start_thread_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainyard-metrics-flusher",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._flush_interval_s)
            self._wake.clear()
            self._deliver()
            with self._buffer_lock:
                if self._closed:
                    return

    def _deliver(self) -> None:
        """Hands everything buffered so far to the sink. REQUIRES: _write_lock not held."""
        with self._write_lock:
            self._deliver_locked()

    def _deliver_locked(self) -> None:
        with self._buffer_lock:
            if not self._buffer:
                return
            batch = list(self._buffer)
            self._buffer.clear()
            self._pending_points = 0
        self._write_batch(batch)

    def _write_batch(self, batch: list[bytes]) -> None:
        """REQUIRES: _write_lock held."""
        try:
            self._sink.write_lines(batch)
        except OSError as e:
            # The lines are lost: retrying a failing file forever would only grow memory.
            # The first error of each kind is printed; counts are kept for tests/diagnosis.
            first = self._last_write_error is None or \
                type(e) is not type(self._last_write_error)
            self._write_errors += 1
            self._last_write_error = e
            if first:
                print(f"trainyard: could not write {len(batch)} metrics lines: {e}",
                      file=sys.stderr, flush=True)

    def flush(self, timeout: float | None = None) -> bool:
        """Hands everything logged before this call to the sink.

        Returns False if `timeout` seconds passed first (the sink is stalled).
        """
        acquired = self._write_lock.acquire(timeout=-1 if timeout is None else timeout)
        if not acquired:
            return False
        try:
            self._deliver_locked()
        finally:
            self._write_lock.release()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Flushes, stops the background thread and closes the sink. Idempotent.

        Records logged after close() are written synchronously, one call at a time.
        """
        with self._buffer_lock:
            if self._closed:
                return
        flushed = self.flush(timeout)
        with self._buffer_lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if flushed:
            self._sink.close()
        if self._register_atexit:
            atexit.unregister(self._close_at_exit)

    def _close_at_exit(self) -> None:
        # Bounded, so that a stalled sink cannot hang the job's exit.
        self.close(timeout=10.0)

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent writes what was buffered, and the flusher thread
        did not survive the fork; start afresh so the child neither duplicates lines nor
        waits on locks that a parent thread held at fork time."""
        self._buffer_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._buffer.clear()
        self._pending_points = 0
        self._wake = threading.Event()
        self._thread = None

    # ---- introspection ----

    @property
    def dropped_lines(self) -> int:
        """Lines dropped because the buffer was full."""
        with self._buffer_lock:
            return self._dropped_lines

    @property
    def buffered_lines(self) -> int:
        """Lines waiting for the background thread."""
        with self._buffer_lock:
            return len(self._buffer)

    @property
    def write_errors(self) -> int:
        """Batches the sink failed to take."""
        return self._write_errors


_live_loggers: "weakref.WeakSet[MetricsLogger]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for logger in list(_live_loggers):
        logger._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def sink_from_env(env: Mapping[str, str]) -> MetricsSink:
    """Returns the sink the job's environment asks for.

    TRAINYARD_METRICS_FILE is the default and, for now, the only transport. The
    server's batch endpoint (TRAINYARD_SERVER + TRAINYARD_RUN_TOKEN) is not built yet;
    when it is, an HTTP sink is chosen here and nothing else in the SDK changes.
    """
    path = env.get("TRAINYARD_METRICS_FILE", "")
    if path:
        return FileSink(path)
    return NullSink()
