"""Checkpointer: snapshot isolation, atomic persistence, integrity, retention, resume."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import unittest
from typing import Any
from unittest import mock

from trainyard import checkpoint, records
from trainyard.checkpoint import Checkpointer, CheckpointError, checkpoint_name
from trainyard.logger import MetricsLogger

from support import PYTHON, ListSink, child_env


def complete_files(directory: str) -> list[str]:
    return sorted(n for n in os.listdir(directory) if checkpoint.step_of(n) is not None)


class CheckpointTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self) -> None:
        self._tmp.cleanup()

    def checkpointer(self, **kwargs: Any) -> Checkpointer:
        c = Checkpointer(kwargs.pop("directory", self.dir), **kwargs)
        self.addCleanup(c.close)
        return c


class SaveLoadTest(CheckpointTestCase):
    def test_round_trips_bytes_and_objects(self) -> None:
        c = self.checkpointer()
        c.save(10, b"\x00raw bytes")
        c.wait()
        self.assertEqual(c.load_latest(), (10, b"\x00raw bytes"))
        c.save(20, {"w": [1.5, 2.5], "step": 20})
        c.wait()
        self.assertEqual(c.load_latest(), (20, {"w": [1.5, 2.5], "step": 20}))
        self.assertEqual(c.loaded_path, os.path.join(self.dir, checkpoint_name(20)))
        with open(os.path.join(self.dir, "latest")) as f:
            self.assertEqual(f.read(), "step-00000020.ckpt\n")

    def test_snapshot_is_taken_at_save_time(self) -> None:
        # The persist is held until the live state has been mutated, so a checkpoint
        # that read the state late would show the mutation.
        gate = threading.Event()
        real = checkpoint._write_durably

        def gated(directory: str, name: str, data: bytes, temp: str) -> str:
            gate.wait()
            return real(directory, name, data, temp)

        c = self.checkpointer()
        with mock.patch.object(checkpoint, "_write_durably", gated):
            state = {"w": [0.0] * 100}
            c.save(1, state)
            state["w"][0] = 99.0  # the training loop goes on mutating its state
            gate.set()
            c.wait()
            self.assertEqual(c.load_latest(), (1, {"w": [0.0] * 100}))
            gate.clear()
            buffer = bytearray(b"before")
            c.save(2, buffer)
            buffer[:] = b"after!"
            gate.set()
            c.wait()
            self.assertEqual(c.load_latest(), (2, b"before"))

    def test_empty_directory_has_nothing_to_load(self) -> None:
        self.assertIsNone(self.checkpointer().load_latest())

    def test_unpicklable_state_is_rejected_at_save(self) -> None:
        with self.assertRaisesRegex(CheckpointError, "step 3: cannot pickle"):
            self.checkpointer().save(3, threading.Lock())

    def test_reports_checkpoint_saved(self) -> None:
        sink = ListSink()
        logger = MetricsLogger(sink, register_atexit=False)
        c = self.checkpointer(logger=logger, clock_ms=lambda: 1000)
        c.save(7, b"x" * 100)
        c.wait()
        logger.close()
        [record] = [records.parse_line(l) for l in sink.lines]
        self.assertEqual(record["kind"], "checkpoint")
        self.assertEqual(record["path"], os.path.join(self.dir, checkpoint_name(7)))
        self.assertEqual(record["step"], 7)
        self.assertEqual(record["started_ms"], 1000)
        self.assertEqual(record["bytes"], 100 + checkpoint.HEADER_BYTES)

    def test_persist_failure_surfaces_in_wait(self) -> None:
        sub = os.path.join(self.dir, "sub")
        c = self.checkpointer(directory=sub)
        os.rmdir(sub)
        with open(sub, "w"):
            pass  # the directory is now a plain file: every write fails
        c.save(1, b"x")
        with self.assertRaisesRegex(CheckpointError, "step 1"):
            c.wait()
        os.remove(sub)
        os.mkdir(sub)
        c.save(2, b"y")
        c.wait()  # a later success clears the error
        self.assertEqual(c.persisted_step, 2)


class CoalescingTest(CheckpointTestCase):
    def test_saves_during_a_persist_coalesce_to_the_newest(self) -> None:
        gate = threading.Event()
        entered = threading.Event()
        real = checkpoint._write_durably

        def gated(directory: str, name: str, data: bytes, temp: str) -> str:
            if name == checkpoint_name(1):
                entered.set()
                gate.wait()
            return real(directory, name, data, temp)

        with mock.patch.object(checkpoint, "_write_durably", gated):
            c = self.checkpointer(keep=10)
            c.save(1, b"one")
            self.assertTrue(entered.wait(20))
            # Step 1 is stuck in flight; these return at once and only 4 survives.
            for step in (2, 3, 4):
                c.save(step, str(step).encode())
            self.assertEqual(c.coalesced, 2)
            self.assertFalse(c.wait(timeout=0.01))
            gate.set()
            self.assertTrue(c.wait(timeout=20))
        self.assertEqual(complete_files(self.dir), [checkpoint_name(1), checkpoint_name(4)])
        self.assertEqual(c.load_latest(), (4, b"4"))


class RetentionTest(CheckpointTestCase):
    def test_keeps_the_newest_n(self) -> None:
        c = self.checkpointer(keep=3)
        for step in range(100, 700, 100):
            c.save(step, step)
            c.wait()
        self.assertEqual(complete_files(self.dir),
                         [checkpoint_name(s) for s in (400, 500, 600)])
        self.assertEqual(c.load_latest(), (600, 600))

    def test_keep_must_be_positive(self) -> None:
        with self.assertRaisesRegex(ValueError, "keep.*0"):
            Checkpointer(self.dir, keep=0)


class IntegrityTest(CheckpointTestCase):
    def _save_steps(self, *steps: int) -> None:
        c = self.checkpointer(keep=10)
        for step in steps:
            c.save(step, {"step": step})
            c.wait()

    def test_truncated_newest_and_leftover_temp_fall_back_to_previous(self) -> None:
        self._save_steps(1, 2)
        # What a crash in the middle of a (non-atomic) copy could leave: the newest file
        # cut short, the pointer already naming it, and a stray temp file.
        path3 = os.path.join(self.dir, checkpoint_name(3))
        data = checkpoint.encode(3, {"step": 3, "pad": "x" * 1000})
        with open(path3, "wb") as f:
            f.write(data[:len(data) // 2])  # header intact, payload short
        with open(os.path.join(self.dir, "latest"), "w") as f:
            f.write(checkpoint_name(3) + "\n")
        # A complete-looking temp file (pid 1 is alive, so it is not swept): never read.
        with open(os.path.join(self.dir, ".step-00000004.ckpt.tmp-1-1"), "wb") as f:
            f.write(checkpoint.encode(4, {"step": 4}))
        self.assertEqual(Checkpointer(self.dir).load_latest(), (2, {"step": 2}))

    def test_flipped_byte_is_detected(self) -> None:
        self._save_steps(1, 2)
        path2 = os.path.join(self.dir, checkpoint_name(2))
        with open(path2, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 0xFF]))
        with self.assertRaisesRegex(CheckpointError, "SHA-256"):
            checkpoint.read_checkpoint(path2)
        self.assertEqual(Checkpointer(self.dir).load_latest(), (1, {"step": 1}))

    def test_killed_mid_write_leaves_the_previous_checkpoint(self) -> None:
        # The child saves step 1, then saves step 2 through an os.write that stops
        # halfway and hangs; the test kills it there with SIGKILL.
        code = (
            "import os, sys, time, trainyard\n"
            "c = trainyard.Checkpointer(sys.argv[1])\n"
            "c.save(1, b'good' * 1000); c.wait()\n"
            "real_write = os.write\n"
            "def stalled_write(fd, data):\n"
            "    real_write(fd, bytes(data[:len(data) // 2]))\n"
            "    print('halfway', flush=True)\n"
            "    time.sleep(3600)\n"
            "os.write = stalled_write\n"
            "c.save(2, b'new!' * 100000)\n"
            "c.wait()\n")
        with subprocess.Popen([PYTHON, "-c", code, self.dir], stdout=subprocess.PIPE,
                              text=True, env=child_env()) as child:
            try:
                assert child.stdout is not None
                self.assertEqual(child.stdout.readline().strip(), "halfway")
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=30)
        leftovers = [n for n in os.listdir(self.dir) if ".tmp-" in n]
        self.assertEqual(len(leftovers), 1, os.listdir(self.dir))
        self.assertEqual(complete_files(self.dir), [checkpoint_name(1)])
        c = self.checkpointer()
        self.assertEqual(c.load_latest(), (1, b"good" * 1000))
        c.save(2, b"again")  # the first persist sweeps the dead writer's temp file
        c.wait()
        self.assertFalse(os.path.exists(os.path.join(self.dir, leftovers[0])))


class ProcessLifecycleTest(CheckpointTestCase):
    def test_exit_without_wait_still_persists(self) -> None:
        code = ("import sys, trainyard\n"
                "trainyard.Checkpointer(sys.argv[1]).save(9, b'last words')\n")
        subprocess.run([PYTHON, "-c", code, self.dir], check=True, timeout=60,
                       env=child_env())
        self.assertEqual(Checkpointer(self.dir).load_latest(), (9, b"last words"))

    def test_forked_child_does_not_wait_for_the_parents_persist(self) -> None:
        gate = threading.Event()
        real = checkpoint._write_durably

        def gated(directory: str, name: str, data: bytes, temp: str) -> str:
            gate.wait()
            return real(directory, name, data, temp)

        with mock.patch.object(checkpoint, "_write_durably", gated):
            c = self.checkpointer()
            c.save(1, b"parent's")
            pid = os.fork()
            if pid == 0:  # the child: must neither hang nor write the parent's snapshot
                os._exit(0 if c.wait(timeout=5) else 1)
            _, status = os.waitpid(pid, 0)
            gate.set()
            c.wait()
        self.assertEqual(os.waitstatus_to_exitcode(status), 0)
        self.assertEqual(complete_files(self.dir), [checkpoint_name(1)])


class ResumeFromTest(CheckpointTestCase):
    def test_resume_from_wins_over_a_newer_pointer(self) -> None:
        c = self.checkpointer(keep=10)
        for step in (1, 2, 3):
            c.save(step, step)
            c.wait()
        chosen = os.path.join(self.dir, checkpoint_name(2))
        self.assertEqual(Checkpointer(self.dir, resume_from=chosen).load_latest(), (2, 2))

    def test_corrupt_resume_from_falls_back_to_newest_complete(self) -> None:
        other = os.path.join(self.dir, "previous-attempt")
        c = self.checkpointer(directory=other, keep=10)
        for step in (1, 2):
            c.save(step, step)
            c.wait()
        bad = os.path.join(other, checkpoint_name(2))
        with open(bad, "r+b") as f:
            f.truncate(10)
        new_dir = os.path.join(self.dir, "new")
        self.assertEqual(Checkpointer(new_dir, resume_from=bad).load_latest(), (1, 1))

    def test_resume_from_a_directory(self) -> None:
        other = os.path.join(self.dir, "elsewhere")
        c = self.checkpointer(directory=other)
        c.save(5, "five")
        c.wait()
        new_dir = os.path.join(self.dir, "new")
        self.assertEqual(Checkpointer(new_dir, resume_from=other).load_latest(), (5, "five"))


if __name__ == "__main__":
    unittest.main()
