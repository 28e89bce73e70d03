"""Two-phase checkpointing: a quick in-memory snapshot, then persistence in the background.

Phase 1, `save(step, state)`, runs in the training loop: the state is turned into
bytes at once (bytes are copied; any other object is pickled), so whatever the loop
changes afterwards cannot leak into the checkpoint. That is the only time the loop
pays. Phase 2 runs in a background thread and makes the bytes durable:

  1. write header + payload to `.step-NNNNNNNN.ckpt.tmp-PID-SEQ` in the same directory,
  2. flush and fsync the file,
  3. rename it to `step-NNNNNNNN.ckpt` (atomic within one file system),
  4. fsync the directory, so the rename itself survives a power cut,
  5. replace the `latest` pointer the same way (temp file, fsync, rename, fsync dir),
  6. report the checkpoint in the metrics file (`checkpoint_saved`),
  7. delete complete checkpoints beyond the `keep` most recent.

A crash at any point leaves either the previous complete checkpoint or the new one,
plus perhaps a temp file that readers ignore. Each file starts with a header holding
the payload's length and SHA-256, so a truncated or corrupted file (a bad disk, a copy
cut short) is detected on load and an older complete checkpoint is used instead.

Coalescing: at most one persist is in flight. A save() made while one is in flight
does not wait: its snapshot becomes the pending one, replacing any older pending
snapshot that had not started (counted in `coalesced`). So the training loop never
blocks on disk, memory holds at most two snapshots, and the newest state always gets
written. wait() blocks until the newest snapshot is durable; call it before exiting.

Threading: save(), wait(), load_latest() may be called from any thread; the persist
thread is private. One Checkpointer should own a directory: two writers in one
directory would race on the `latest` pointer and on retention.

File layout (big-endian):
  magic  8 bytes  b"TYCKPT\\x00\\x01"
  step   u64
  length u64      payload bytes
  format u8       0 = raw bytes (returned as bytes), 1 = pickle
  sha256 32 bytes of the payload
  payload
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import os
import pickle
import re
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import records
from .logger import MetricsLogger

MAGIC = b"TYCKPT\x00\x01"
_HEADER = struct.Struct(">8sQQB32s")
HEADER_BYTES = _HEADER.size
FORMAT_RAW = 0
FORMAT_PICKLE = 1
LATEST_POINTER = "latest"
_NAME = re.compile(r"step-(\d+)\.ckpt")
_TEMP = re.compile(r"\..*\.tmp-(\d+)-\d+")


class CheckpointError(Exception):
    """A checkpoint could not be written or read; the message says which file and why."""


def checkpoint_name(step: int) -> str:
    """Returns the file name of the checkpoint of `step`, e.g. step-00001200.ckpt."""
    return f"step-{step:08d}.ckpt"


def step_of(name: str) -> int | None:
    """Returns the step in a complete checkpoint's file name, or None for other names."""
    match = _NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def encode(step: int, state: Any) -> bytes:
    """Returns the checkpoint file contents for `state` (bytes-like are stored as is)."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        payload, fmt = bytes(state), FORMAT_RAW
    else:
        try:
            payload, fmt = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL), FORMAT_PICKLE
        except Exception as e:  # pickle raises many types (TypeError, PicklingError, ...)
            raise CheckpointError(
                f"checkpoint state of step {step}: cannot pickle {type(state).__name__}: {e}; "
                "pass bytes, or an object pickle can serialise") from e
    header = _HEADER.pack(MAGIC, step, len(payload), fmt, hashlib.sha256(payload).digest())
    return header + payload


def decode(data: bytes, path: str = "<memory>") -> tuple[int, Any]:
    """Returns (step, state) from checkpoint file contents.

    Raises CheckpointError if the data is truncated, corrupt or not a checkpoint.
    """
    if len(data) < HEADER_BYTES:
        raise CheckpointError(f"{path}: {len(data)} bytes is shorter than the "
                              f"{HEADER_BYTES}-byte header (truncated)")
    magic, step, length, fmt, digest = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CheckpointError(f"{path}: not a Trainyard checkpoint (magic {magic!r})")
    payload = data[HEADER_BYTES:]
    if len(payload) != length:
        raise CheckpointError(f"{path}: payload is {len(payload)} bytes, header says "
                              f"{length} (truncated or appended to)")
    if hashlib.sha256(payload).digest() != digest:
        raise CheckpointError(f"{path}: SHA-256 of the payload does not match the header "
                              "(corrupt)")
    if fmt == FORMAT_RAW:
        return step, payload
    if fmt == FORMAT_PICKLE:
        try:
            return step, pickle.loads(payload)
        except Exception as e:  # the bytes are intact, so this is a code/version mismatch
            raise CheckpointError(f"{path}: cannot unpickle the state: {e}") from e
    raise CheckpointError(f"{path}: unknown payload format {fmt}")


def read_checkpoint(path: str) -> tuple[int, Any]:
    """Returns (step, state) stored at `path`; raises CheckpointError if unusable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read: {e.strerror or e}") from e
    return decode(data, path)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(directory: str, name: str, data: bytes, temp_name: str) -> str:
    """Writes `data` to directory/name via a temp file + fsync + rename + dir fsync."""
    temp = os.path.join(directory, temp_name)
    final = os.path.join(directory, name)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _remove_quietly(temp)
        raise
    os.close(fd)
    os.replace(temp, final)
    _fsync_dir(directory)
    return final


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    step: int
    data: bytes
    started_ms: int
    snapshot_ms: int


class Checkpointer:
    """Saves and loads the checkpoints of one job in one directory."""

    def __init__(self, directory: str, *, keep: int = 3,
                 logger: MetricsLogger | None = None, resume_from: str | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        """`directory` is created if missing. `keep` >= 1 complete checkpoints are kept.
        `logger` receives checkpoint_saved records (None: none are reported).
        `resume_from` is the control plane's choice (TRAINYARD_RESUME_FROM), tried first
        by load_latest(); None or "" means none."""
        if not directory:
            raise ValueError("directory: must be a path, got an empty string "
                             "(set TRAINYARD_CHECKPOINT_DIR or pass directory=)")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep: must be an int >= 1, got {keep!r}")
        self.directory = os.path.abspath(directory)
        self.keep = keep
        self._logger = logger
        self._resume_from = resume_from or None
        self._clock_ms = clock_ms or (lambda: time.time_ns() // 1_000_000)
        os.makedirs(self.directory, exist_ok=True)

        self._cond = threading.Condition()
        self._pending: _Snapshot | None = None
        self._in_flight: _Snapshot | None = None
        self._error: CheckpointError | None = None
        self._persisted_step: int | None = None
        self._coalesced = 0
        self._temp_seq = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._loaded_path: str | None = None
        self._swept = False
        # Registered after the logger exists, so at exit (LIFO) the last checkpoint is
        # made durable and reported before the logger's own atexit flush.
        atexit.register(self._wait_at_exit)
        _live_checkpointers.add(self)

    # ---- phase 1: snapshot (caller's thread) ----

    def save(self, step: int, state: Any) -> None:
        """Snapshots `state` as the checkpoint of `step` and returns; persists later.

        `state` is bytes (stored as is) or any picklable object (pickled now).
        Raises ValueError for a bad step and CheckpointError if `state` cannot be pickled.
        """
        checked_step = records.check_step(step)
        started_ms = self._clock_ms()
        t0 = time.perf_counter()
        data = encode(checked_step, state)
        snapshot = _Snapshot(checked_step, data, started_ms,
                             int((time.perf_counter() - t0) * 1000))
        with self._cond:
            if self._closed:
                raise CheckpointError("Checkpointer is closed")
            if self._pending is not None:
                self._coalesced += 1
            self._pending = snapshot
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="trainyard-checkpoint-persist")
                self._thread.start()
            self._cond.notify_all()

    # ---- phase 2: persist (background thread) ----

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                snapshot, self._pending = self._pending, None
                self._in_flight = snapshot
            error: CheckpointError | None = None
            try:
                self._persist(snapshot)
            except Exception as e:  # any failure must reach wait(), not kill the thread
                error = e if isinstance(e, CheckpointError) else CheckpointError(
                    f"{self.directory}: checkpoint of step {snapshot.step} failed: {e}")
                print(f"trainyard: {error}", file=sys.stderr, flush=True)
            with self._cond:
                self._in_flight = None
                self._error = error
                if error is None:
                    self._persisted_step = snapshot.step
                self._cond.notify_all()

    def _next_temp_name(self, name: str) -> str:
        with self._cond:
            self._temp_seq += 1
            return f".{name}.tmp-{os.getpid()}-{self._temp_seq}"

    def _persist(self, snapshot: _Snapshot) -> None:
        if not self._swept:
            # Only a writer sweeps: a reader on another node cannot tell whether the pid
            # in a temp file's name is alive, and the directory has one writer.
            self._swept = True
            self._sweep_stale_temp_files()
        name = checkpoint_name(snapshot.step)
        path = _write_durably(self.directory, name, snapshot.data, self._next_temp_name(name))
        _write_durably(self.directory, LATEST_POINTER, (name + "\n").encode(),
                       self._next_temp_name(LATEST_POINTER))
        if self._logger is not None:
            try:
                self._logger.checkpoint_saved(
                    path, snapshot.step, started_ms=snapshot.started_ms,
                    duration_ms=max(0, self._clock_ms() - snapshot.started_ms),
                    bytes=len(snapshot.data), snapshot_ms=snapshot.snapshot_ms)
            except Exception as e:  # the checkpoint is durable; a lost report is not fatal
                print(f"trainyard: checkpoint {path} saved but not reported: {e}",
                      file=sys.stderr, flush=True)
        self._apply_retention()

    def _apply_retention(self) -> None:
        complete = sorted((s, n) for n in os.listdir(self.directory)
                          if (s := step_of(n)) is not None)
        for _, name in complete[:-self.keep]:
            _remove_quietly(os.path.join(self.directory, name))

    def _sweep_stale_temp_files(self) -> None:
        """Deletes temp files left by writers that crashed (their process is gone)."""
        for name in os.listdir(self.directory):
            match = _TEMP.fullmatch(name)
            if match and int(match.group(1)) != os.getpid() \
                    and not _pid_alive(int(match.group(1))):
                _remove_quietly(os.path.join(self.directory, name))

    def _forget_after_fork(self) -> None:
        """In a forked child: the parent's persist thread owns the pending snapshots and
        did not survive the fork, so the child must not wait for them (at exit, it would
        wait forever) nor write them a second time."""
        self._cond = threading.Condition()
        self._pending = None
        self._in_flight = None
        self._thread = None

    # ---- waiting ----

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until every snapshot saved so far is durable (or superseded).

        Returns False if `timeout` seconds passed first. Raises CheckpointError if the
        most recent persist failed.
        """
        with self._cond:
            done = self._cond.wait_for(
                lambda: self._pending is None and self._in_flight is None, timeout)
            if done and self._error is not None:
                raise self._error
            return done

    def _wait_at_exit(self) -> None:
        try:
            self.wait()
        except CheckpointError:
            pass  # already printed by the persist thread

    def close(self) -> None:
        """Waits for pending work, then stops the persist thread. Idempotent."""
        try:
            self.wait()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join()
            atexit.unregister(self._wait_at_exit)

    @property
    def persisted_step(self) -> int | None:
        """Step of the newest checkpoint this Checkpointer made durable."""
        with self._cond:
            return self._persisted_step

    @property
    def coalesced(self) -> int:
        """Snapshots replaced by a newer one before they were written."""
        with self._cond:
            return self._coalesced

    # ---- loading ----

    def _candidates(self) -> list[str]:
        """Checkpoint paths to try, best first; may repeat a path."""
        paths: list[str] = []
        directories = [self.directory]
        if self._resume_from:
            if os.path.isdir(self._resume_from):
                directories.insert(0, os.path.abspath(self._resume_from))
            else:
                paths.append(self._resume_from)
                parent = os.path.dirname(os.path.abspath(self._resume_from))
                if parent != self.directory:
                    directories.append(parent)
        for directory in directories:
            try:
                with open(os.path.join(directory, LATEST_POINTER), encoding="utf-8") as f:
                    name = f.read().strip()
                if step_of(name) is not None:  # ignore a pointer to anything odd
                    paths.append(os.path.join(directory, name))
            except (OSError, UnicodeDecodeError):
                pass
        # Newest first across all directories, as a fallback when the above are corrupt.
        found: list[tuple[int, str]] = []
        for directory in directories:
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            found.extend((s, os.path.join(directory, n)) for n in names
                         if (s := step_of(n)) is not None)
        paths.extend(p for _, p in sorted(found, reverse=True))
        return paths

    def load_latest(self) -> tuple[int, Any] | None:
        """Returns (step, state) of the checkpoint to resume from, or None if none exists.

        Tries, in order: `resume_from`, the `latest` pointer, then every complete
        checkpoint newest first; the first that passes the integrity check wins. Temp
        files are never read. A skipped (corrupt, truncated) file is reported on stderr.
        """
        tried: set[str] = set()
        for path in self._candidates():
            if path in tried:
                continue
            tried.add(path)
            try:
                step, state = read_checkpoint(path)
            except CheckpointError as e:
                print(f"trainyard: skipping checkpoint: {e}", file=sys.stderr, flush=True)
                continue
            self._loaded_path = path
            return step, state
        return None

    @property
    def loaded_path(self) -> str | None:
        """Path the last successful load_latest() read."""
        return self._loaded_path


_live_checkpointers: "weakref.WeakSet[Checkpointer]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for checkpointer in list(_live_checkpointers):
        checkpointer._forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
