"""Preemption notice: by real signal, by file, handler chaining, and in a child process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import unittest

from trainyard.preemption import EXIT_PREEMPTED, PreemptionWatcher, parse_signal

from support import PYTHON, child_env, wait_until


class SignalTest(unittest.TestCase):
    def setUp(self) -> None:
        self._saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGUSR2)}

    def tearDown(self) -> None:
        for s, handler in self._saved.items():
            signal.signal(s, handler)

    def test_real_signal_sets_the_flag(self) -> None:
        watcher = PreemptionWatcher(preempt_file="")
        watcher.install(signal.SIGUSR1)
        self.assertFalse(watcher.requested())
        os.kill(os.getpid(), signal.SIGUSR1)
        wait_until(watcher.requested, what="the SIGUSR1 handler")
        self.assertEqual(watcher.signal_received, signal.SIGUSR1)

    def test_chains_to_the_previous_handler(self) -> None:
        seen: list[int] = []
        signal.signal(signal.SIGUSR2, lambda signum, frame: seen.append(signum))
        watcher = PreemptionWatcher(preempt_file="")
        watcher.install("USR2")
        watcher.install("SIGUSR2")  # idempotent: must not chain to itself
        os.kill(os.getpid(), signal.SIGUSR2)
        wait_until(lambda: bool(seen), what="the previous handler")
        self.assertTrue(watcher.requested())
        self.assertEqual(seen, [signal.SIGUSR2])

    def test_parse_signal(self) -> None:
        self.assertEqual(parse_signal("SIGUSR1"), signal.SIGUSR1)
        self.assertEqual(parse_signal("usr2"), signal.SIGUSR2)
        self.assertEqual(parse_signal("10"), 10)
        for bad in ["SIGKILL", "9", "SIGNOPE", "", 1.5]:
            with self.assertRaises(ValueError) as ctx:
                parse_signal(bad)  # type: ignore[arg-type]
            self.assertIn(repr(bad), str(ctx.exception))


class FileTest(unittest.TestCase):
    def test_file_sets_the_flag_and_notice_is_parsed(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "preempt")
            watcher = PreemptionWatcher(preempt_file=path)
            self.assertFalse(watcher.requested())
            self.assertIsNone(watcher.notice())
            with open(path, "w") as f:
                json.dump({"deadline_ms": 1000, "signal": 10, "grace_ms": 60000}, f)
            self.assertTrue(watcher.requested())
            self.assertEqual(watcher.notice(), {"deadline_ms": 1000, "signal": 10,
                                                "grace_ms": 60000})
            os.remove(path)
            self.assertTrue(watcher.requested(), "a notice is never withdrawn")


class ChildProcessTest(unittest.TestCase):
    # The child reports readiness, then polls like a training loop would.
    CHILD = ("import sys, time, trainyard\n"
             "print('ready', flush=True)\n"
             "while not trainyard.preemption_requested(): time.sleep(0.001)\n"
             "sys.exit(trainyard.EXIT_PREEMPTED)\n")

    def _signal_child(self, signum: int, **env: str) -> int:
        with subprocess.Popen([PYTHON, "-c", self.CHILD], stdout=subprocess.PIPE, text=True,
                              env=child_env(**env)) as child:
            try:
                assert child.stdout is not None
                self.assertEqual(child.stdout.readline().strip(), "ready")
                child.send_signal(signum)
                return child.wait(timeout=30)
            finally:
                child.kill()

    def test_sigusr1_does_not_kill_a_job_that_imported_the_sdk(self) -> None:
        self.assertEqual(self._signal_child(signal.SIGUSR1), EXIT_PREEMPTED)

    def test_env_names_another_notice_signal(self) -> None:
        self.assertEqual(self._signal_child(signal.SIGUSR2, TRAINYARD_PREEMPT_SIGNAL="SIGUSR2"),
                         EXIT_PREEMPTED)


if __name__ == "__main__":
    unittest.main()
