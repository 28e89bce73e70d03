"""On-demand profiling: recording the next steps of a running job when Trainyard asks.

`trainyard profile JOB` makes the server send each asked rank's agent a `profile`
command, and the agent writes TRAINYARD_PROFILE_FILE, JSON {"id", "steps", "dir"}
(through a rename: never seen half-written). A Profiler notices the file by its
modification time, looked at no more than every 0.5 s, from the metrics logger's
background thread (and from profile_requested()); from the next `log(step=...)` on it
records `steps` steps:

- with torch.profiler when the job has already imported torch (the SDK never imports
  it): CPU activity, and CUDA when torch.cuda.is_available(); prof.step() at each step;
  the trace is torch's export_chrome_trace;
- otherwise with its own spans: each step an "X" event from the previous step's log call
  to this one, named "step N", its args the metrics logged; each checkpoint_saved() a
  "checkpoint" span (and a nested "checkpoint snapshot" for the time the loop was held
  up), all as Chrome trace JSON with timestamps in microseconds since the Unix epoch, so
  that the ranks' traces line up.

A step is a change of the step number: several log calls at one step (training values,
then eval/*) make one step, their metrics merged. The trace goes to <dir>/<id>.json
(written to a temporary name, then renamed), and "profile" records in the metrics file
(docs/metrics-file.md) say how it went: "recording" when it begins, then "stored" with
the path, or "failed" with a message. The agent uploads the stored trace to the server.

It never raises into the training loop: whatever goes wrong becomes a "failed" record.
log() only appends an event to a list (or calls prof.step()); the trace is written on a
background thread. A request that arrives while one is being recorded waits for it;
one the job never gets to (it ends first) is failed by the server. At close (the
logger's, at exit) a recording still under way is stopped and stored with what it has.

Threading: poll() and requested() from any thread; on_step() from the thread that logs
steps (the training loop); on_checkpoint() from any thread (a Checkpointer's writer).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Protocol

from . import records

DEFAULT_POLL_INTERVAL_S = 0.5
MAX_STEPS = 10_000


def imported_torch() -> ModuleType | None:
    """The torch module if the job has imported it (never imports it), else None."""
    torch = sys.modules.get("torch")
    return torch if isinstance(torch, ModuleType) else None


class _Recording(Protocol):
    id: str
    steps: int
    path: str
    mode: str

    def step(self, step: int, metrics: Mapping[str, object]) -> bool: ...
    def checkpoint(self, record: Mapping[str, Any]) -> None: ...
    def stop(self) -> None: ...
    def write(self, path: str) -> None: ...


class _SpanRecording:
    """The SDK's own spans: steps between log calls, and checkpoints."""

    mode = "spans"

    def __init__(self, request: Mapping[str, Any], first_step: int, rank: int,
                 clock_ns: Callable[[], int]) -> None:
        self.id: str = request["id"]
        self.steps: int = request["steps"]
        self.path = os.path.join(request["dir"], f"{self.id}.json")
        self._rank = rank
        self._clock_ns = clock_ns
        self._wall0_us = clock_ns() // 1000
        self._mono0 = time.perf_counter()
        self._last = self._mono0
        self._last_step = first_step
        self._done = 0
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()  # checkpoint() comes from other threads

    def _us(self, t: float) -> int:
        return self._wall0_us + int((t - self._mono0) * 1e6)

    def step(self, step: int, metrics: Mapping[str, object]) -> bool:
        now = time.perf_counter()
        with self._lock:
            if step == self._last_step:
                if self._events and self._events[-1]["cat"] == "step":
                    self._events[-1]["args"].update(metrics)
                return False
            self._events.append({"name": f"step {step}", "cat": "step", "ph": "X",
                                 "ts": self._us(self._last),
                                 "dur": max(0, int((now - self._last) * 1e6)),
                                 "pid": self._rank, "tid": 1,
                                 "args": {"step": step, **metrics}})
            self._last, self._last_step = now, step
            self._done += 1
            return self._done >= self.steps

    def checkpoint(self, record: Mapping[str, Any]) -> None:
        started_ms = record.get("started_ms")
        duration_ms = record.get("duration_ms")
        if started_ms is None:
            ts, dur = self._clock_ns() // 1000, 0
        else:
            ts, dur = started_ms * 1000, (duration_ms or 0) * 1000
        args = {k: record[k] for k in ("path", "step", "bytes", "snapshot_ms") if k in record}
        with self._lock:
            self._events.append({"name": "checkpoint", "cat": "checkpoint", "ph": "X",
                                 "ts": ts, "dur": dur, "pid": self._rank, "tid": 2,
                                 "args": args})
            if started_ms is not None and record.get("snapshot_ms") is not None:
                self._events.append({"name": "checkpoint snapshot", "cat": "checkpoint",
                                     "ph": "X", "ts": ts, "dur": record["snapshot_ms"] * 1000,
                                     "pid": self._rank, "tid": 2, "args": {}})

    def stop(self) -> None:
        pass

    def write(self, path: str) -> None:
        with self._lock:
            events = list(self._events)
            done = self._done
        meta = [{"name": "process_name", "ph": "M", "pid": self._rank, "tid": 0,
                 "args": {"name": f"rank {self._rank}"}},
                {"name": "thread_name", "ph": "M", "pid": self._rank, "tid": 1,
                 "args": {"name": "steps"}},
                {"name": "thread_name", "ph": "M", "pid": self._rank, "tid": 2,
                 "args": {"name": "checkpoints"}}]
        trace = {"traceEvents": meta + events, "displayTimeUnit": "ms",
                 "otherData": {"profile": self.id, "rank": self._rank, "steps": done,
                               "steps_asked": self.steps, "source": "trainyard-sdk"}}
        with open(path, "w", encoding="ascii") as f:
            json.dump(trace, f, separators=(",", ":"), allow_nan=False)


class _TorchRecording:
    """torch.profiler, stepped at each log call."""

    mode = "torch"

    def __init__(self, request: Mapping[str, Any], first_step: int, torch: ModuleType) -> None:
        self.id: str = request["id"]
        self.steps: int = request["steps"]
        self.path = os.path.join(request["dir"], f"{self.id}.json")
        profiler = getattr(torch, "profiler", None) or importlib.import_module("torch.profiler")
        activities = [profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(profiler.ProfilerActivity.CUDA)
        self._prof = profiler.profile(activities=activities)
        self._prof.start()
        self._last_step = first_step
        self._done = 0

    def step(self, step: int, metrics: Mapping[str, object]) -> bool:
        if step == self._last_step:
            return False
        self._last_step = step
        self._prof.step()
        self._done += 1
        return self._done >= self.steps

    def checkpoint(self, record: Mapping[str, Any]) -> None:
        pass  # torch records what the checkpoint did on the training thread

    def stop(self) -> None:
        self._prof.stop()

    def write(self, path: str) -> None:
        self._prof.export_chrome_trace(path)


def _read_request(path: str) -> dict[str, Any]:
    """The request file's JSON, checked; ValueError naming what is wrong. A request
    with a usable id but bad other fields comes back with "error" set."""
    with open(path, encoding="utf-8") as f:
        value = json.load(f)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    pid = value.get("id")
    if not isinstance(pid, str) or records.PROFILE_ID_PATTERN.fullmatch(pid) is None:
        raise ValueError(f"id: must be 1-64 of A-Z a-z 0-9 . _ -, got {pid!r}")
    steps = value.get("steps")
    directory = value.get("dir")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_STEPS:
        value["error"] = f"the request's steps must be 1..{MAX_STEPS}, got {steps!r}"
    elif not isinstance(directory, str) or not directory:
        value["error"] = f"the request's dir must be a directory, got {directory!r}"
    return value


class Profiler:
    """Records a profile when TRAINYARD_PROFILE_FILE asks for one (see the module
    docstring). `torch_module` returns the torch to use, or None for the SDK's own
    spans (default: torch if the job imported it)."""

    def __init__(self, request_file: str, *, rank: int = 0,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
                 torch_module: Callable[[], ModuleType | None] = imported_torch,
                 clock_ns: Callable[[], int] = time.time_ns) -> None:
        self.request_file = request_file
        self.poll_interval_s = poll_interval_s
        self._rank = rank
        self._torch_module = torch_module
        self._clock_ns = clock_ns
        self._emit: Callable[[dict[str, Any]], None] | None = None
        # poll(): one at a time, at most every poll_interval_s.
        self._poll_lock = threading.Lock()
        self._next_poll = 0.0
        self._seen: tuple[int, int, int] | None = None
        # _state_lock guards the request waiting to begin, the one being recorded, the
        # ids already taken and the writer threads. Held briefly; never during I/O.
        self._state_lock = threading.Lock()
        self._pending: dict[str, Any] | None = None
        self._active: _Recording | None = None
        self._taken: set[str] = set()
        self._writers: list[threading.Thread] = []
        self._disabled = False
        _live_profilers.add(self)

    def attach(self, emit: Callable[[dict[str, Any]], None]) -> None:
        """Where "profile" records go (MetricsLogger does this)."""
        self._emit = emit

    # ---- noticing a request ----

    def requested(self) -> bool:
        """True while a profile is asked for and not yet recorded (polls the file)."""
        self.poll()
        return self._pending is not None or self._active is not None

    def poll(self) -> None:
        """Looks at the request file if poll_interval_s has passed since the last look."""
        if self._disabled or time.monotonic() < self._next_poll:
            return
        if not self._poll_lock.acquire(blocking=False):
            return
        try:
            self._next_poll = time.monotonic() + self.poll_interval_s
            try:
                st = os.stat(self.request_file)
            except OSError:
                return
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
            if key == self._seen:
                return
            self._seen = key
            try:
                request = _read_request(self.request_file)
            except (OSError, ValueError) as e:
                print(f"trainyard: profile request {self.request_file}: {e}; ignored",
                      file=sys.stderr, flush=True)
                return
        finally:
            self._poll_lock.release()
        with self._state_lock:
            active = self._active
            if request["id"] in self._taken or (active is not None and active.id == request["id"]):
                return
            self._pending = request

    # ---- recording (the training loop's thread) ----

    def on_step(self, step: int, metrics: Mapping[str, object]) -> None:
        """Called by every log(step=...): begins, advances or ends a recording."""
        if self._active is None and self._pending is None:
            return
        request: dict[str, Any] | None = None
        finished: _Recording | None = None
        failed: tuple[str, str] | None = None
        with self._state_lock:
            recording = self._active
            if recording is None:
                request, self._pending = self._pending, None
                if request is None:
                    return
                self._taken.add(request["id"])
            else:
                try:
                    if recording.step(step, metrics):
                        self._active, finished = None, recording
                except Exception as e:  # e.g. torch refusing; never into the loop
                    self._active = None
                    failed = (recording.id, f"{type(e).__name__}: {e}")
        if failed is not None:
            self._record(failed[0], "failed", message=failed[1])
            return
        if finished is not None:
            self._finish(finished)
        elif request is not None:
            self._begin(request, step)

    def _begin(self, request: dict[str, Any], step: int) -> None:
        pid = request["id"]
        if "error" in request:
            self._record(pid, "failed", message=request["error"])
            return
        torch = None
        try:
            torch = self._torch_module()
            recording: _Recording
            if torch is not None:
                recording = _TorchRecording(request, step, torch)
            else:
                recording = _SpanRecording(request, step, self._rank, self._clock_ns)
        except Exception as e:
            where = "torch.profiler" if torch is not None else "the SDK's profiler"
            self._record(pid, "failed", message=f"{where} could not start: "
                                                f"{type(e).__name__}: {e}")
            return
        with self._state_lock:
            self._active = recording
        self._record(pid, "recording", steps=recording.steps, mode=recording.mode)

    def on_checkpoint(self, record: Mapping[str, Any]) -> None:
        """Called by checkpoint_saved(): a checkpoint span while recording."""
        recording = self._active
        if recording is None:
            return
        try:
            recording.checkpoint(record)
        except Exception as e:  # a span lost is not worth failing the profile for
            print(f"trainyard: profile {recording.id}: checkpoint span: {e}", file=sys.stderr,
                  flush=True)

    def _finish(self, recording: _Recording, background: bool = True) -> None:
        """Stops `recording` (here: torch wants the thread that started it), then writes
        the trace and records how it went (on a thread of its own, unless told not to)."""
        try:
            recording.stop()
        except Exception as e:
            self._record(recording.id, "failed", message=f"stopping the profiler: "
                                                         f"{type(e).__name__}: {e}")
            return
        if not background:
            self._write(recording)
            return
        writer = threading.Thread(target=self._write, args=(recording,),
                                  name="trainyard-profile-writer", daemon=True)
        with self._state_lock:
            self._writers = [w for w in self._writers if w.is_alive()] + [writer]
        writer.start()

    def _write(self, recording: _Recording) -> None:
        tmp = f"{recording.path}.tmp"
        try:
            os.makedirs(os.path.dirname(recording.path) or ".", exist_ok=True)
            recording.write(tmp)
            os.replace(tmp, recording.path)
        except Exception as e:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            self._record(recording.id, "failed", message=f"writing the trace to "
                                                         f"{recording.path}: "
                                                         f"{type(e).__name__}: {e}")
            return
        self._record(recording.id, "stored", path=recording.path, mode=recording.mode)

    def _record(self, pid: str, status: str, **fields: Any) -> None:
        emit = self._emit
        if emit is None:
            return
        try:
            emit(records.profile_record(self._clock_ns() // 1_000_000, pid, self._rank, status,
                                        **fields))
        except Exception as e:
            print(f"trainyard: profile {pid}: could not record {status}: {e}", file=sys.stderr,
                  flush=True)

    # ---- the end ----

    def close(self, timeout: float | None = None) -> None:
        """Stores what a recording under way has so far, and waits up to `timeout`
        seconds for traces being written (their records follow them)."""
        with self._state_lock:
            recording, self._active = self._active, None
            self._pending = None
            self._disabled = True
        if recording is not None:
            self._finish(recording, background=False)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state_lock:
            writers = list(self._writers)
        for w in writers:
            w.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent answers the request, not its children."""
        self._disabled = True
        self._state_lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._pending = None
        self._active = None
        self._writers = []


_live_profilers: "weakref.WeakSet[Profiler]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for profiler in list(_live_profilers):
        profiler._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def profiler_from_env(env: Mapping[str, str]) -> Profiler | None:
    """A Profiler for TRAINYARD_PROFILE_FILE (the agent sets it), as rank RANK; None
    when the variable is unset."""
    path = env.get("TRAINYARD_PROFILE_FILE", "")
    if not path:
        return None
    raw_rank = env.get("RANK", "").strip()
    rank = int(raw_rank) if raw_rank.isdigit() else 0
    return Profiler(path, rank=rank)
