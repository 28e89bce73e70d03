"""MetricsLogger: batching, non-blocking logging, file format, exit flush."""

from __future__ import annotations

import math
import os
import subprocess
import tempfile
import threading
import unittest

import trainyard
from trainyard import records
from trainyard.logger import FileSink, MetricsLogger

from support import PYTHON, GatedSink, ListSink, child_env, wait_until


class FileSinkTest(unittest.TestCase):
    def test_lines_are_written_and_parseable(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "sub", "rank-0.jsonl")  # parent is created
            logger = MetricsLogger(FileSink(path), clock_ms=lambda: 42,
                                   register_atexit=False)
            logger.log_params({"lr": 0.1})
            for step in range(1, 101):
                logger.log(step, loss=1.0 / step, grad_norm=math.nan)
            logger.log_metrics(100, {"eval/loss": 0.5})
            logger.checkpoint_saved("/c/step-00000100.ckpt", 100, bytes=10)
            self.assertTrue(logger.flush(timeout=20))
            with open(path, "rb") as f:
                data = f.read()
            logger.close()
        self.assertTrue(data.endswith(b"\n"))
        parsed = [records.parse_line(line) for line in data.splitlines()]
        self.assertEqual(len(parsed), 103)
        self.assertEqual(parsed[0], {"kind": "params", "time_ms": 42, "params": {"lr": 0.1}})
        self.assertEqual([p["step"] for p in parsed[1:101]], list(range(1, 101)))
        self.assertEqual(parsed[1]["metrics"]["loss"], 1.0)
        self.assertTrue(math.isnan(parsed[1]["metrics"]["grad_norm"]))
        self.assertEqual(parsed[101]["metrics"], {"eval/loss": 0.5})
        self.assertEqual(parsed[102]["kind"], "checkpoint")

    def test_appends_to_an_existing_file(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.jsonl")
            for run in range(2):
                logger = MetricsLogger(FileSink(path), register_atexit=False)
                logger.log(run, loss=1.0)
                logger.close()
            with open(path, "rb") as f:
                self.assertEqual([records.parse_line(l)["step"] for l in f], [0, 1])


class BatchingTest(unittest.TestCase):
    def test_log_does_not_wait_for_a_stalled_sink(self) -> None:
        sink = GatedSink()
        logger = MetricsLogger(sink, flush_interval_s=0.01, flush_points=10,
                               register_atexit=False)
        logger.log(0, loss=1.0)
        self.assertTrue(sink.entered.wait(20), "background thread never wrote")
        # The flusher is now stuck inside the sink. Logging must still return at once;
        # if log() waited on I/O this thread would never finish.
        done = threading.Event()

        def loop() -> None:
            for step in range(1, 5001):
                logger.log(step, loss=float(step))
            done.set()

        threading.Thread(target=loop, daemon=True).start()
        self.assertTrue(done.wait(20), "log() blocked behind a stalled sink")
        self.assertFalse(logger.flush(timeout=0.05), "flush() should time out while stalled")
        sink.gate.set()
        self.assertTrue(logger.flush(timeout=20))
        self.assertEqual([records.parse_line(l)["step"] for l in sink.lines],
                         list(range(0, 5001)))
        logger.close()
        self.assertTrue(sink.closed)

    def test_enough_points_wake_the_flusher_before_the_interval(self) -> None:
        sink = ListSink()
        # An interval of an hour: only the point count can cause this write.
        logger = MetricsLogger(sink, flush_interval_s=3600, flush_points=1000,
                               register_atexit=False)
        for step in range(99):
            logger.log(step, a=1.0, b=2.0, c=3.0, d=4.0, e=5.0, f=6.0, g=7.0, h=8.0,
                       i=9.0, j=10.0)  # 990 points: below the threshold
        logger.log(99, a=1.0, b=2.0, c=3.0, d=4.0, e=5.0, f=6.0, g=7.0, h=8.0, i=9.0,
                   j=10.0)
        wait_until(lambda: len(sink.lines) == 100, what="a flush triggered by 1000 points")
        logger.close()

    def test_the_interval_flushes_a_few_points(self) -> None:
        sink = ListSink()
        logger = MetricsLogger(sink, flush_interval_s=0.01, register_atexit=False)
        logger.log(1, loss=1.0)
        wait_until(lambda: len(sink.lines) == 1, what="a flush by the interval")
        logger.close()

    def test_drops_oldest_lines_when_the_buffer_is_full(self) -> None:
        sink = GatedSink()
        logger = MetricsLogger(sink, flush_interval_s=0.01, max_buffered_lines=100,
                               register_atexit=False)
        logger.log(0, loss=0.0)
        self.assertTrue(sink.entered.wait(20))
        for step in range(1, 301):
            logger.log(step, loss=float(step))
        self.assertEqual(logger.dropped_lines, 200)
        self.assertEqual(logger.buffered_lines, 100)
        sink.gate.set()
        logger.close()
        steps = [records.parse_line(l)["step"] for l in sink.lines]
        self.assertEqual(steps, [0] + list(range(201, 301)))

    def test_bad_key_raises_at_the_call(self) -> None:
        logger = MetricsLogger(ListSink(), register_atexit=False)
        with self.assertRaisesRegex(ValueError, "'bad key'"):
            logger.log_metrics(1, {"bad key": 1.0})
        with self.assertRaisesRegex(ValueError, "'loss'.*'high'"):
            logger.log(1, loss="high")
        self.assertEqual(logger.buffered_lines, 0)
        logger.close()

    def test_records_after_close_are_written_synchronously(self) -> None:
        sink = ListSink()
        logger = MetricsLogger(sink, register_atexit=False)
        logger.close()
        logger.checkpoint_saved("/c/x", 3)
        self.assertEqual(len(sink.lines), 1)


class ForkTest(unittest.TestCase):
    def test_forked_child_does_not_repeat_the_parents_lines(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.jsonl")
            logger = MetricsLogger(FileSink(path), flush_interval_s=3600,
                                   register_atexit=False)
            logger.log(1, loss=1.0)  # buffered in the parent at fork time
            pid = os.fork()
            if pid == 0:
                logger.log(2, loss=2.0)
                os._exit(0 if logger.flush(timeout=5) else 1)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(os.waitstatus_to_exitcode(status), 0)
            logger.close()
            with open(path, "rb") as f:
                steps = sorted(records.parse_line(l)["step"] for l in f)
        self.assertEqual(steps, [1, 2])


class ModuleApiTest(unittest.TestCase):
    def test_exit_flushes_without_an_explicit_flush(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.jsonl")
            code = ("import trainyard\n"
                    "for s in range(50): trainyard.log(step=s, loss=float(s))\n")
            subprocess.run([PYTHON, "-c", code], check=True, timeout=60,
                           env=child_env(TRAINYARD_METRICS_FILE=path))
            with open(path, "rb") as f:
                lines = [records.parse_line(l) for l in f.read().splitlines()]
        # The default logger puts the env.* params before the first record.
        self.assertEqual(lines[0]["kind"], "params")
        self.assertIn("env.packages_sha256", lines[0]["params"])
        self.assertEqual([r["step"] for r in lines[1:]], list(range(50)))

    def test_configure_replaces_the_default_logger(self) -> None:
        sink = ListSink()
        trainyard.configure(sink=sink, log_environment=False)
        try:
            trainyard.log(step=1, loss=2.0)
            trainyard.log_params({"seed": 1})
            self.assertTrue(trainyard.flush(timeout=20))
            self.assertEqual(len(sink.lines), 2)
        finally:
            trainyard.configure(sink=ListSink())

    def test_rank_variables_are_validated(self) -> None:
        old = os.environ.get("WORLD_SIZE")
        os.environ["WORLD_SIZE"] = "two"
        try:
            with self.assertRaisesRegex(ValueError, "WORLD_SIZE.*'two'"):
                trainyard.world_size()
        finally:
            if old is None:
                del os.environ["WORLD_SIZE"]
            else:
                os.environ["WORLD_SIZE"] = old


if __name__ == "__main__":
    unittest.main()
