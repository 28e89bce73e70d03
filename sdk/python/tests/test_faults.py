"""Injected-fault effects and checkpoint requests: files the agent writes, read cheaply."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import tempfile
import unittest
from unittest import mock

from trainyard.faults import (DEFAULT_EFFECTS, CheckpointRequestWatcher, FaultWatcher,
                              parse_effects)

from support import PYTHON, child_env


def write_atomically(path: str, text: str) -> None:
    """As the agent does: whole, through a rename."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class FaultWatcherTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.path = os.path.join(self._tmp.name, "5.0.1.json")
        self.watcher = FaultWatcher(self.path)

    def test_no_file_means_no_effects(self) -> None:
        self.assertEqual(self.watcher.effects(), DEFAULT_EFFECTS)
        self.assertEqual(FaultWatcher("").effects(), DEFAULT_EFFECTS)

    def test_reads_the_effects_and_notices_each_rewrite(self) -> None:
        write_atomically(self.path, json.dumps({"slow_factor": 3.0, "hang": False,
                                                "data_stall_s": 0.0, "loss_nan": True,
                                                "grad_spike": False}) + "\n")
        self.assertEqual(self.watcher.effects(), {"slow_factor": 3.0, "hang": False,
                                                  "data_stall_s": 0.0, "loss_nan": True,
                                                  "grad_spike": False})
        write_atomically(self.path, json.dumps({"slow_factor": 1.0, "hang": True,
                                                "data_stall_s": 1.0, "loss_nan": False,
                                                "grad_spike": True}))
        effects = self.watcher.effects()
        self.assertTrue(effects["hang"])
        self.assertEqual(effects["data_stall_s"], 1.0)
        self.assertTrue(effects["grad_spike"])
        os.remove(self.path)
        self.assertEqual(self.watcher.effects(), DEFAULT_EFFECTS, "a removed file: no faults")

    def test_an_unchanged_file_is_not_read_again(self) -> None:
        write_atomically(self.path, json.dumps({"slow_factor": 2.5}))
        self.assertEqual(self.watcher.effects()["slow_factor"], 2.5)
        with mock.patch.object(builtins, "open", side_effect=AssertionError("read again")):
            for _ in range(100):
                self.assertEqual(self.watcher.effects()["slow_factor"], 2.5)

    def test_callers_cannot_change_the_cached_effects(self) -> None:
        write_atomically(self.path, json.dumps({"hang": True}))
        self.watcher.effects()["hang"] = False
        self.assertTrue(self.watcher.effects()["hang"])

    def test_unreadable_or_malformed_files_mean_no_effects(self) -> None:
        write_atomically(self.path, "{not json")
        self.assertEqual(self.watcher.effects(), DEFAULT_EFFECTS)
        write_atomically(self.path, "[1, 2]")
        self.assertEqual(self.watcher.effects(), DEFAULT_EFFECTS)
        self.assertEqual(parse_effects({"slow_factor": "fast", "hang": 1, "data_stall_s": -1,
                                        "loss_nan": True, "extra": 7}),
                         {**DEFAULT_EFFECTS, "loss_nan": True})
        self.assertEqual(parse_effects({"slow_factor": float("inf")}), DEFAULT_EFFECTS)
        self.assertEqual(parse_effects({"slow_factor": True}), DEFAULT_EFFECTS)


class CheckpointRequestWatcherTest(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self._tmp.cleanup)
        self.path = os.path.join(self._tmp.name, "5.0.1")
        self.watcher = CheckpointRequestWatcher(self.path)

    def test_each_new_request_id_is_seen_once(self) -> None:
        self.assertFalse(self.watcher.requested())
        write_atomically(self.path, "1\n")
        self.assertTrue(self.watcher.requested())
        self.assertFalse(self.watcher.requested())
        self.assertFalse(self.watcher.requested())
        write_atomically(self.path, "2\n")
        self.assertTrue(self.watcher.requested())
        self.assertFalse(self.watcher.requested())
        write_atomically(self.path, "2\n")  # rewritten, same id: not a new request
        self.assertFalse(self.watcher.requested())

    def test_a_request_written_before_the_first_look_counts(self) -> None:
        write_atomically(self.path, "7\n")
        self.assertTrue(CheckpointRequestWatcher(self.path).requested())

    def test_no_file_or_an_empty_one_is_no_request(self) -> None:
        self.assertFalse(CheckpointRequestWatcher("").requested())
        write_atomically(self.path, "  \n")
        self.assertFalse(self.watcher.requested())


class ModuleFunctionsTest(unittest.TestCase):
    CHILD = ("import json, trainyard\n"
             "print(json.dumps(trainyard.faults()))\n"
             "print(trainyard.checkpoint_requested(), trainyard.checkpoint_requested())\n")

    def run_child(self, **env: str) -> list[str]:
        result = subprocess.run([PYTHON, "-c", self.CHILD], env=child_env(**env),
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stderr)
        return result.stdout.splitlines()

    def test_read_the_files_the_agent_names(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            fault_file = os.path.join(tmp, "faults.json")
            request_file = os.path.join(tmp, "request")
            write_atomically(fault_file, json.dumps({"slow_factor": 1.8, "grad_spike": True}))
            write_atomically(request_file, "3\n")
            out = self.run_child(TRAINYARD_FAULT_FILE=fault_file,
                                 TRAINYARD_CHECKPOINT_REQUEST_FILE=request_file)
            self.assertEqual(json.loads(out[0]), {**DEFAULT_EFFECTS, "slow_factor": 1.8,
                                                  "grad_spike": True})
            self.assertEqual(out[1], "True False")

    def test_outside_trainyard_nothing_is_asked(self) -> None:
        out = self.run_child()
        self.assertEqual(json.loads(out[0]), DEFAULT_EFFECTS)
        self.assertEqual(out[1], "False False")


if __name__ == "__main__":
    unittest.main()
