"""Helpers shared by the SDK tests: polling with a deadline, and a controllable sink."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(os.path.dirname(SDK_DIR))


def wait_until(predicate: Callable[[], bool], deadline_s: float = 20.0,
               what: str = "condition") -> None:
    """Polls `predicate` until it holds; fails loudly after `deadline_s`.

    The deadline is only a bound on a hang: a passing test never waits for it.
    """
    end = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        time.sleep(0.005)


class GatedSink:
    """A sink whose writes block until `gate` is set: a stalled file or network."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.lines: list[bytes] = []
        self.closed = False

    def write_lines(self, lines: Sequence[bytes]) -> None:
        self.entered.set()
        self.gate.wait()
        self.lines.extend(lines)

    def close(self) -> None:
        self.closed = True


class ListSink:
    """Collects lines in memory."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.batches = 0

    def write_lines(self, lines: Sequence[bytes]) -> None:
        self.batches += 1
        self.lines.extend(lines)

    def close(self) -> None:
        pass


def child_env(**extra: str) -> dict[str, str]:
    """Environment for a child Python that imports the SDK, without Trainyard variables
    inherited from whoever runs the tests."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINYARD_") and k not in (
               "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
               "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = SDK_DIR + (os.pathsep + env["PYTHONPATH"]
                                   if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


PYTHON = sys.executable
