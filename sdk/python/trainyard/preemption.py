"""Noticing that the control plane wants the job to stop.

When Trainyard preempts a job, the agent first writes TRAINYARD_PREEMPT_FILE (JSON:
{"deadline_ms", "signal", "grace_ms"}), then sends the notice signal (SIGUSR1 unless
the job spec says otherwise) to every process of the rank; after the grace period come
SIGTERM and SIGKILL. A job is told in two ways so that it notices even if one fails:
a handler installed late or replaced by a library still leaves the file, and a file
system that is slow to show the file still leaves the signal.

The signal handler only sets a flag. Python runs handlers in the main thread between
bytecodes, so doing real work there (saving a checkpoint) would run at an arbitrary
point of the training step; the loop polls `requested()` at a step boundary instead.

Threading: install() must be called from the main thread (a rule of Python's
`signal` module); requested() and notice() may be called from any thread.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Union

SignalHandler = Union[Callable[[int, Union[FrameType, None]], Any], int, signal.Handlers, None]

# Exit status of a job that stopped because it was preempted, after saving a checkpoint
# it can resume from: EX_TEMPFAIL from sysexits.h ("temporary failure, try again later").
# Distinct from 0 so the control plane can tell "finished" from "stopped early, requeue".
EXIT_PREEMPTED = 75


def parse_signal(value: Union[int, str]) -> int:
    """Returns the number of a signal given as 10, "10", "USR1" or "SIGUSR1".

    Raises ValueError naming the value otherwise.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    elif isinstance(value, str):
        name = value.strip().upper()
        if not name.startswith("SIG"):
            name = "SIG" + name
        member = getattr(signal.Signals, name, None) if name.isidentifier() else None
        if member is None:
            raise ValueError(f"signal {value!r} is not a known signal name; "
                             "use e.g. SIGUSR1, USR2 or a number")
        number = int(member)
    else:
        raise ValueError(f"signal {value!r} must be a signal number or name such as SIGUSR1")
    if number in (signal.SIGKILL, signal.SIGSTOP) or number not in signal.valid_signals():
        raise ValueError(f"signal {value!r} cannot be caught; use e.g. SIGUSR1 or SIGUSR2")
    return number


class PreemptionWatcher:
    """Tracks whether a preemption notice arrived, by signal or by file."""

    def __init__(self, preempt_file: Callable[[], str] | str | None = None) -> None:
        """`preempt_file` is a path, or a function returning one (read at each check),
        or None for TRAINYARD_PREEMPT_FILE from the environment."""
        if preempt_file is None:
            self._preempt_file: Callable[[], str] = \
                lambda: os.environ.get("TRAINYARD_PREEMPT_FILE", "")
        elif isinstance(preempt_file, str):
            path = preempt_file
            self._preempt_file = lambda: path
        else:
            self._preempt_file = preempt_file
        # Plain attributes, not a threading.Event: a signal handler must not take locks
        # the interrupted main thread might hold.
        self._signalled = False
        self._signal_received: int | None = None
        self._seen_file = False
        self._previous: dict[int, SignalHandler] = {}
        self._install_lock = threading.Lock()

    def install(self, signum: Union[int, str] = signal.SIGUSR1) -> None:
        """Handles `signum` by setting the preemption flag; idempotent.

        A handler that was installed before (a Python callable) is still called after the
        flag is set; a default or ignore disposition is replaced, since the default
        action of SIGUSR1 would kill the job before it could checkpoint.
        """
        number = parse_signal(signum)
        with self._install_lock:
            current = signal.getsignal(number)
            if current == self._handle:
                return
            self._previous[number] = current
            signal.signal(number, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self._signalled = True
        self._signal_received = signum
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)

    def requested(self) -> bool:
        """True once the notice signal arrived or the preempt file exists."""
        if self._signalled or self._seen_file:
            return True
        path = self._preempt_file()
        if path and os.path.exists(path):
            self._seen_file = True
        return self._seen_file

    def notice(self) -> dict[str, Any] | None:
        """Returns the preempt file's JSON (deadline_ms, signal, grace_ms), or None if the
        file is absent or unreadable (e.g. only the signal arrived, or it is mid-write)."""
        path = self._preempt_file()
        if not path:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                value = json.load(f)
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    @property
    def signal_received(self) -> int | None:
        """The notice signal that arrived, if one did."""
        return self._signal_received


def notice_signal_from_env(env: Mapping[str, str]) -> int:
    """Returns the notice signal: TRAINYARD_PREEMPT_SIGNAL if set, else SIGUSR1.

    Raises ValueError naming the variable if it holds no catchable signal.
    """
    value = env.get("TRAINYARD_PREEMPT_SIGNAL", "")
    if not value:
        return int(signal.SIGUSR1)
    try:
        return parse_signal(value)
    except ValueError as e:
        raise ValueError(f"TRAINYARD_PREEMPT_SIGNAL: {e}") from None
