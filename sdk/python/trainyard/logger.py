"""Batched, non-blocking metrics logging.

A MetricsLogger turns each call (log, log_params, checkpoint_saved) into one encoded
line in the caller's thread, appends it to an in-memory buffer and returns: the
training loop never waits on a file or the network. A background thread hands the
buffer to a MetricsSink every `flush_interval_s` seconds, or sooner once
`flush_points` metric values are waiting; `flush()` and interpreter exit (atexit) hand
it over too.

Where the lines go is the sink's business: FileSink appends to TRAINYARD_METRICS_FILE
(the agent tails it); HttpSink (http_sink.py) posts them to the server's batch endpoint
for jobs that run outside Trainyard. Both are called only from the background thread,
or from flush() and close(), never from log().

Environment params: a logger made with `log_environment=True` (the default logger,
unless TRAINYARD_LOG_ENVIRONMENT=0) logs the env.* params (environment.py) once, with
the first record. They are collected on the background thread (reading every installed
distribution's metadata takes tens of milliseconds), so log() does not wait for them;
flush() does. A failure to collect them is reported on stderr and otherwise ignored.

Profiling: a logger made with a `profiler` (profiler.py; the default logger has one when
TRAINYARD_PROFILE_FILE is set) hands it every log call's step and metrics and every
checkpoint, lets its background thread look for profile requests (at most every
0.5 s), and writes the profiler's "profile" records like any other, promptly.

Metric sources: objects added with add_metric_source (data_timing.TimedLoader, which
adds data_wait_s) are asked for metrics to add to each metrics record, in the caller's
thread; a key the record already has is left as the caller logged it.

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
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from . import records
from .environment import environment_params
from .profiler import Profiler

# The most lines kept in memory while a sink is not keeping up; beyond it the oldest go.
DEFAULT_MAX_BUFFERED_LINES = 100_000
# How long the flush at interpreter exit may take, so a stalled sink cannot hang the exit.
EXIT_TIMEOUT_S = 10.0


class MetricsSink(Protocol):
    """Where encoded lines go. Called from one thread at a time (the logger serialises).

    Two optional methods, looked up with getattr, serve sinks that keep what they could
    not deliver (HttpSink): `retry_pending()`, called by the background thread at every
    interval even when nothing new was logged, and `set_deadline(deadline)`, called by
    close(timeout) before its last flush: from then on write_lines and close must give
    up by `deadline` (a time.monotonic() value, a little before close's own).
    """

    def write_lines(self, lines: Sequence[bytes]) -> None:
        """Delivers whole lines, in order; raises OSError on failure."""

    def close(self) -> None:
        """Releases resources; write_lines may not be called afterwards."""


class MetricSource(Protocol):
    """Adds metrics of its own to the records a job logs (TimedLoader adds data_wait_s).

    Held by the logger through a weak reference: a source that is no longer used goes
    away by itself.
    """

    def take_metrics(self, step: int, previous_step: int | None
                     ) -> Mapping[str, float] | None:
        """Returns the metrics to add to the record at `step`, or None. `previous_step`
        is the step of the metrics record logged before it (None for the first). What
        it returns is no longer pending, whether or not the record had the key already.
        Called from log(), in the caller's thread: must be quick and must not log."""


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


# Environment params: not asked for yet / asked for, the background thread collects them /
# logged (or given up on).
_ENV_IDLE, _ENV_PENDING, _ENV_DONE = range(3)


class MetricsLogger:
    """Buffers records and writes them to a sink from a background thread.

    `log_environment`: log the env.* params with the first record (see the module
    docstring); `environment` is what collects them (tests pass their own).
    """

    def __init__(self, sink: MetricsSink, *, flush_interval_s: float = 0.5,
                 flush_points: int = 1000,
                 max_buffered_lines: int = DEFAULT_MAX_BUFFERED_LINES,
                 clock_ms: Callable[[], int] = wall_clock_ms,
                 register_atexit: bool = True, log_environment: bool = False,
                 environment: Callable[[], Mapping[str, object]] = environment_params,
                 profiler: Profiler | None = None) -> None:
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

        # Environment params. _env_state is guarded by _buffer_lock; _env_ready is clear
        # while the background thread still has to collect them (flush() waits for it).
        self._env_auto = log_environment
        self._environment = environment
        self._env_state = _ENV_IDLE
        self._env_ready = threading.Event()
        self._env_ready.set()

        self._profiler = profiler
        if profiler is not None:
            profiler.attach(self._append_profile_record)

        # Replaced whole (under _buffer_lock), so log() reads it without the lock.
        self._metric_sources: tuple[weakref.ref[MetricSource], ...] = ()
        self._last_step: int | None = None  # of the latest metrics record

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
        previous_step, self._last_step = self._last_step, record["step"]
        if self._metric_sources:
            self._add_source_metrics(record["step"], previous_step, record["metrics"])
        self._append(records.encode_line(record), len(record["metrics"]))
        if self._profiler is not None:
            try:
                self._profiler.on_step(record["step"], record["metrics"])
            except Exception as e:  # a profiler bug must not reach the training loop
                print(f"trainyard: profiler: {type(e).__name__}: {e}", file=sys.stderr,
                      flush=True)

    def _add_source_metrics(self, step: int, previous_step: int | None,
                            values: dict[str, object]) -> None:
        """Adds the metric sources' metrics to a record's validated `values`; a key it
        already has keeps its value."""
        for ref in self._metric_sources:
            source = ref()
            extra = source.take_metrics(step, previous_step) if source is not None else None
            if not extra:
                continue
            for key, value in extra.items():
                if key not in values:
                    values[records.check_key(key, "metric")] = records.encode_number(key, value)

    def add_metric_source(self, source: MetricSource) -> None:
        """Asks `source` for metrics to add to every metrics record from now on (once,
        however often it is added). Held weakly."""
        with self._buffer_lock:
            live = tuple(r for r in self._metric_sources if r() is not None)
            if not any(r() is source for r in live):
                live += (weakref.ref(source),)
            self._metric_sources = live

    def remove_metric_source(self, source: MetricSource) -> None:
        """Stops asking `source`; nothing happens if it was not added."""
        with self._buffer_lock:
            self._metric_sources = tuple(r for r in self._metric_sources
                                         if r() is not None and r() is not source)

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
        if self._profiler is not None:
            self._profiler.on_checkpoint(record)

    def _append_profile_record(self, record: Mapping[str, object]) -> None:
        """The profiler's records: the agent acts on them, so they go promptly."""
        self._append(records.encode_line(record), self._flush_points)

    @property
    def profiler(self) -> Profiler | None:
        """The profiler this logger drives, if it has one."""
        return self._profiler

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
                if self._env_auto and self._env_state == _ENV_IDLE:
                    self._request_environment_locked()
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

    # ---- environment params ----

    def log_environment(self) -> None:
        """Logs the env.* params, once per logger (later calls do nothing).

        Returns at once: the background thread collects them and puts them before
        anything still buffered (into the first record, when that is a params record).
        Works whatever `log_environment` the logger was made with.
        """
        with self._buffer_lock:
            if self._closed or self._env_state != _ENV_IDLE:
                return
            self._request_environment_locked()
            if self._thread is None:
                self._start_thread_locked()
        self._wake.set()

    def _request_environment_locked(self) -> None:
        """REQUIRES: _buffer_lock held."""
        self._env_state = _ENV_PENDING
        self._env_ready.clear()

    def _collect_environment(self) -> None:
        """On the background thread: collects the env.* params if asked to."""
        with self._buffer_lock:
            if self._env_state != _ENV_PENDING:
                return
        line: bytes | None = None
        try:
            record = records.params_record(self._clock_ms(), self._environment())
            line = records.encode_line(record)
        except Exception as e:  # never let this reach, or stop, the training job
            print(f"trainyard: could not collect the env.* params, logging without them: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)
        if line is not None:
            self._insert_environment(line)
        with self._buffer_lock:
            self._env_state = _ENV_DONE
        self._env_ready.set()

    def _insert_environment(self, line: bytes) -> None:
        """Puts the env params line before everything buffered; merged into the first
        buffered record when that is a params record (the job's values win), so a job
        that starts with log_params still writes a single params record."""
        with self._buffer_lock:
            first = self._buffer[0] if self._buffer else None
        merged = None
        if first is not None and first.startswith(b'{"kind":"params",'):
            try:
                job, env = json.loads(first), json.loads(line)
                params = {**env["params"], **job["params"]}
                merged = records.encode_line(
                    {"kind": "params", "time_ms": job["time_ms"], "params": params})
            except (ValueError, KeyError, TypeError):
                merged = None  # e.g. longer than a line may be: write it separately
        with self._buffer_lock:
            if not self._closed:
                if merged is not None and self._buffer and self._buffer[0] is first:
                    self._buffer[0] = merged
                else:
                    self._buffer.appendleft(line)
                return
        # Closed meanwhile (a close() that gave up waiting): write it as a late record.
        with self._write_lock:
            self._write_batch([line])

    # ---- delivery ----

    def _start_thread_locked(self) -> None:
        self._thread = threading.Thread(target=self._run, name="trainyard-metrics-flusher",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # With a profiler the thread also wakes to look for its requests, more often
        # than it flushes when flush_interval_s is long.
        wait_s = self._flush_interval_s
        if self._profiler is not None:
            wait_s = min(wait_s, max(self._profiler.poll_interval_s, 0.05))
        next_flush = time.monotonic() + self._flush_interval_s
        while True:
            self._collect_environment()
            woken = self._wake.wait(wait_s)
            self._wake.clear()
            self._poll_profiler()
            self._collect_environment()
            if woken or self._profiler is None or time.monotonic() >= next_flush:
                next_flush = time.monotonic() + self._flush_interval_s
                self._deliver()
                self._retry_sink()
            with self._buffer_lock:
                if self._closed:
                    return

    def _poll_profiler(self) -> None:
        if self._profiler is None:
            return
        try:
            self._profiler.poll()
        except Exception as e:  # never let this stop the metrics
            print(f"trainyard: profile request: {type(e).__name__}: {e}", file=sys.stderr,
                  flush=True)

    def _retry_sink(self) -> None:
        """Lets a sink that keeps undelivered lines retry them (MetricsSink)."""
        retry = getattr(self._sink, "retry_pending", None)
        if retry is None:
            return
        with self._write_lock:
            try:
                retry()
            except OSError as e:
                self._note_write_error(e, "retry the kept metrics lines")

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
            self._note_write_error(e, f"write {len(batch)} metrics lines")

    def _note_write_error(self, e: OSError, what: str) -> None:
        """The first error of each kind is printed; counts are kept for tests/diagnosis."""
        first = self._last_write_error is None or type(e) is not type(self._last_write_error)
        self._write_errors += 1
        self._last_write_error = e
        if first:
            print(f"trainyard: could not {what}: {e}", file=sys.stderr, flush=True)

    def flush(self, timeout: float | None = None) -> bool:
        """Hands everything logged before this call to the sink (after the env.* params,
        if the background thread is collecting them).

        Returns False if `timeout` seconds passed first (the sink is stalled).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if threading.current_thread() is not self._thread and \
                not self._env_ready.wait(_remaining(deadline)):
            return False
        remaining = _remaining(deadline)
        acquired = self._write_lock.acquire(timeout=-1 if remaining is None else remaining)
        if not acquired:
            return False
        try:
            self._deliver_locked()
        finally:
            self._write_lock.release()
        return True

    def close(self, timeout: float | None = None) -> None:
        """Flushes, stops the background thread and closes the sink, taking at most
        `timeout` seconds in all (None: as long as the sink needs). Idempotent.

        Records logged after close() are written synchronously, one call at a time.
        """
        with self._buffer_lock:
            if self._closed:
                return
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._profiler is not None:
            # Its last records (a trace stored at exit) go out with this flush.
            self._profiler.close(None if timeout is None else timeout / 2)
        set_deadline = getattr(self._sink, "set_deadline", None)
        if deadline is not None and set_deadline is not None:
            # A moment before ours: a sink busy retrying on the background thread then
            # still leaves time to hand it the last lines and close it.
            set_deadline(deadline - min(0.5, timeout / 10))  # type: ignore[operator]
        flushed = self.flush(timeout)
        with self._buffer_lock:
            self._closed = True
            thread = self._thread
            lost = len(self._buffer)
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(_remaining(deadline))
        if flushed:
            remaining = _remaining(deadline)
            # The lock: the background thread may still be in the sink if join timed out.
            if self._write_lock.acquire(timeout=-1 if remaining is None else remaining):
                try:
                    self._sink.close()
                finally:
                    self._write_lock.release()
        elif lost:
            print(f"trainyard: gave up flushing metrics after {timeout:g} s; {lost} lines "
                  f"were not written", file=sys.stderr, flush=True)
        if self._register_atexit:
            atexit.unregister(self._close_at_exit)

    def _close_at_exit(self) -> None:
        # Bounded, so that a stalled sink cannot hang the job's exit.
        self.close(timeout=EXIT_TIMEOUT_S)

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
        # Env params the parent was collecting are the parent's to write.
        if self._env_state == _ENV_PENDING:
            self._env_state = _ENV_DONE
        self._env_ready = threading.Event()
        self._env_ready.set()

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


def _remaining(deadline: float | None) -> float | None:
    """Seconds left until `deadline` (time.monotonic()), at least 0; None for no deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


_live_loggers: "weakref.WeakSet[MetricsLogger]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for logger in list(_live_loggers):
        logger._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def sink_from_env(env: Mapping[str, str]) -> MetricsSink:
    """Returns the sink the job's environment asks for.

    TRAINYARD_METRICS_FILE (set by the agent for jobs Trainyard runs) comes first.
    Without it, TRAINYARD_SERVER (URL), TRAINYARD_TOKEN (API token) and TRAINYARD_RUN
    (run/job id) together choose an HttpSink that posts to the server's batch endpoint,
    as rank RANK (0 when unset), verifying https against TRAINYARD_CA_CERT when set.
    Otherwise records are validated and discarded (NullSink). A setting that cannot
    work is reported on stderr and also leads to a NullSink: a metrics problem must not
    stop the training job.
    """
    path = env.get("TRAINYARD_METRICS_FILE", "")
    if path:
        return FileSink(path)
    http = {name: env.get(name, "").strip()
            for name in ("TRAINYARD_SERVER", "TRAINYARD_TOKEN", "TRAINYARD_RUN")}
    if http["TRAINYARD_RUN"]:
        # SERVER and TOKEN alone are what the CLI uses; RUN says metrics should go there.
        missing = [name for name, value in http.items() if not value]
        if missing:
            print(f"trainyard: TRAINYARD_RUN is set but {' and '.join(missing)} is not; "
                  f"metrics will not be sent", file=sys.stderr, flush=True)
            return NullSink()
        from .http_sink import HttpSink  # here: http_sink imports this module
        try:
            raw_rank = env.get("RANK", "").strip() or "0"
            if not raw_rank.isdigit():
                raise ValueError(f"RANK: must be an integer >= 0, got {raw_rank!r}")
            return HttpSink(http["TRAINYARD_SERVER"], http["TRAINYARD_TOKEN"],
                            http["TRAINYARD_RUN"], int(raw_rank),
                            ca_cert=env.get("TRAINYARD_CA_CERT") or None)
        except ValueError as e:
            print(f"trainyard: {e}; metrics will not be sent", file=sys.stderr, flush=True)
            return NullSink()
    return NullSink()
