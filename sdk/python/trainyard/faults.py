"""Injected faults and checkpoint requests: what the agent tells a training loop in files.

Fault injection (`trainyard fault inject`, docs/faults.md) lets an operator rehearse
what goes wrong on a cluster. On simulated GPUs the agent fakes the telemetry; the
training loop's part (running slower, hanging, starving for data, a NaN loss, a
gradient spike) only the job itself can play, so the agent writes what the active
faults mean for this rank to TRAINYARD_FAULT_FILE, JSON

    {"slow_factor": 1.0, "hang": false, "data_stall_s": 0.0, "loss_nan": false,
     "grad_spike": false}

through a rename (never seen half-written) whenever that changes. No file means no
faults. A loop that wants to take part reads faults() each step (a stat() when nothing
changed) and plays along: examples/trainer/trainer.py shows how.

A checkpoint request (the server's `checkpoint` command) arrives the same way: the agent
writes a new request id, one line, to TRAINYARD_CHECKPOINT_REQUEST_FILE; each new id
makes checkpoint_requested() return True once.

Threading: every method may be called from any thread.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections.abc import Callable
from typing import Any

DEFAULT_EFFECTS: dict[str, Any] = {"slow_factor": 1.0, "hang": False, "data_stall_s": 0.0,
                                   "loss_nan": False, "grad_spike": False}


def _path_source(path: Callable[[], str] | str | None, variable: str) -> Callable[[], str]:
    """A function returning the watched path: given, or read from `variable` at each call."""
    if path is None:
        return lambda: os.environ.get(variable, "")
    if isinstance(path, str):
        fixed = path
        return lambda: fixed
    return path


def _stat_key(path: str) -> tuple[int, int, int] | None:
    """What tells one version of the file from another, or None when there is none."""
    if not path:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def parse_effects(value: Any) -> dict[str, Any]:
    """The effects a fault file's JSON says, each field checked; a missing or malformed
    field keeps its default (no effect), unknown fields are ignored."""
    effects = dict(DEFAULT_EFFECTS)
    if not isinstance(value, dict):
        return effects
    for key in ("slow_factor", "data_stall_s"):
        v = value.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            if key == "slow_factor" and v > 0 or key == "data_stall_s" and v >= 0:
                effects[key] = float(v)
    for key in ("hang", "loss_nan", "grad_spike"):
        v = value.get(key)
        if isinstance(v, bool):
            effects[key] = v
    return effects


class FaultWatcher:
    """Reads TRAINYARD_FAULT_FILE when it changed (by mtime, size and inode)."""

    def __init__(self, fault_file: Callable[[], str] | str | None = None) -> None:
        """`fault_file` is a path, a function returning one (called at each check), or
        None for TRAINYARD_FAULT_FILE from the environment."""
        self._fault_file = _path_source(fault_file, "TRAINYARD_FAULT_FILE")
        self._lock = threading.Lock()
        self._key: tuple[str, tuple[int, int, int] | None] | None = None
        self._effects = dict(DEFAULT_EFFECTS)

    def effects(self) -> dict[str, Any]:
        """The current effects on this rank (a fresh dict; DEFAULT_EFFECTS when there is
        no file or it cannot be read)."""
        path = self._fault_file()
        key = (path, _stat_key(path))
        with self._lock:
            if key != self._key:
                self._effects = self._read(path) if key[1] is not None else dict(DEFAULT_EFFECTS)
                self._key = key
            return dict(self._effects)

    @staticmethod
    def _read(path: str) -> dict[str, Any]:
        try:
            with open(path, encoding="utf-8") as f:
                return parse_effects(json.load(f))
        except (OSError, ValueError):
            return dict(DEFAULT_EFFECTS)


class CheckpointRequestWatcher:
    """Notices new request ids in TRAINYARD_CHECKPOINT_REQUEST_FILE."""

    def __init__(self, request_file: Callable[[], str] | str | None = None) -> None:
        """`request_file` as for FaultWatcher; None: TRAINYARD_CHECKPOINT_REQUEST_FILE."""
        self._request_file = _path_source(request_file, "TRAINYARD_CHECKPOINT_REQUEST_FILE")
        self._lock = threading.Lock()
        self._key: tuple[str, tuple[int, int, int] | None] | None = None
        self._last_id: str | None = None

    def requested(self) -> bool:
        """True once for each new request id (the first call that sees it); False when
        there is no file, it is empty, or it holds the id already answered."""
        path = self._request_file()
        key = (path, _stat_key(path))
        with self._lock:
            if key == self._key:
                return False
            self._key = key
            if key[1] is None:
                return False
            try:
                with open(path, encoding="utf-8") as f:
                    request_id = f.read().strip()
            except (OSError, ValueError):
                return False
            if not request_id or request_id == self._last_id:
                return False
            self._last_id = request_id
            return True
