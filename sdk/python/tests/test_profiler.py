"""On-demand profiling: a request file in, a Chrome trace and "profile" records out."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
import time
import unittest

import trainyard
from trainyard import records
from trainyard.logger import FileSink, MetricsLogger
from trainyard.profiler import Profiler, profiler_from_env

from support import PYTHON, child_env, wait_until


def write_request(path: str, pid: str, steps: int, directory: str) -> None:
    """As the agent does: whole, through a rename."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({"id": pid, "steps": steps, "dir": directory}, f)
    os.replace(path + ".tmp", path)


def profile_records(metrics_file: str) -> list[dict]:
    if not os.path.exists(metrics_file):
        return []
    with open(metrics_file, "rb") as f:
        lines = [records.parse_line(line) for line in f]
    return [r for r in lines if r["kind"] == "profile"]


class SpansTest(unittest.TestCase):
    """Without torch: the SDK's own step and checkpoint spans."""

    def setUp(self) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.request = os.path.join(self.tmp, "request.json")
        self.out = os.path.join(self.tmp, "out")
        self.metrics = os.path.join(self.tmp, "metrics.jsonl")
        self.profiler = Profiler(self.request, rank=3, poll_interval_s=0.0,
                                 torch_module=lambda: None)
        self.logger = MetricsLogger(FileSink(self.metrics), flush_interval_s=0.01,
                                    register_atexit=False, profiler=self.profiler)

    def tearDown(self) -> None:
        self.logger.close(timeout=10)
        self._tmp.cleanup()

    def stored(self, pid: str) -> dict:
        wait_until(lambda: any(r["id"] == pid and r["status"] in ("stored", "failed")
                               for r in profile_records(self.metrics)),
                   what=f"profile {pid} to be stored")
        return [r for r in profile_records(self.metrics)
                if r["id"] == pid and r["status"] != "recording"][0]

    def test_request_file_gives_a_trace_of_n_steps_and_records(self) -> None:
        self.logger.log(1, loss=3.0)  # before any request: nothing happens
        self.assertFalse(self.profiler.requested())
        write_request(self.request, "p-7-1", 3, self.out)
        self.assertTrue(self.profiler.requested())
        self.assertTrue(self.profiler.requested(), "still asked until it is recorded")
        for step in range(2, 9):
            self.logger.log(step, loss=1.0 / step, lr=0.1)
            if step == 3:
                self.logger.log_metrics(3, {"eval/loss": 0.5})  # same step: merged
                self.logger.checkpoint_saved("/ck/step-3", 3, started_ms=1_000,
                                             duration_ms=20, snapshot_ms=5)
            time.sleep(0.002)
        stored = self.stored("p-7-1")
        self.assertFalse(self.profiler.requested())
        self.assertEqual(stored["status"], "stored", stored)
        self.assertEqual(stored["rank"], 3)
        self.assertEqual(stored["mode"], "spans")
        self.assertEqual(stored["path"], os.path.join(self.out, "p-7-1.json"))
        statuses = [r["status"] for r in profile_records(self.metrics)]
        self.assertEqual(statuses, ["recording", "stored"])

        with open(stored["path"], encoding="ascii") as f:
            trace = json.load(f)
        steps = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
        # Begins at the first log call after the request (step 2): steps 3, 4, 5.
        self.assertEqual([e["name"] for e in steps], ["step 3", "step 4", "step 5"])
        for e in steps:
            self.assertEqual(e["ph"], "X")
            self.assertEqual(e["pid"], 3)
            self.assertGreater(e["dur"], 0)
            self.assertGreater(e["ts"], 1_600_000_000_000_000)  # microseconds since 1970
        self.assertEqual(steps[0]["args"], {"step": 3, "loss": 1.0 / 3, "lr": 0.1,
                                            "eval/loss": 0.5})
        self.assertLessEqual(steps[0]["ts"] + steps[0]["dur"], steps[1]["ts"] + 1)
        ckpt = [e for e in trace["traceEvents"] if e["name"] == "checkpoint"]
        self.assertEqual(ckpt, [{"name": "checkpoint", "cat": "checkpoint", "ph": "X",
                                 "ts": 1_000_000, "dur": 20_000, "pid": 3, "tid": 2,
                                 "args": {"path": "/ck/step-3", "step": 3, "snapshot_ms": 5}}])
        names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
        self.assertEqual(names, {"rank 3", "steps", "checkpoints"})
        self.assertEqual(trace["otherData"]["profile"], "p-7-1")

    def test_a_request_is_answered_once_and_a_new_one_again(self) -> None:
        write_request(self.request, "p-7-1", 1, self.out)
        self.assertTrue(self.profiler.requested())
        for step in range(1, 4):
            self.logger.log(step, loss=1.0)
        self.stored("p-7-1")
        os.utime(self.request)  # the same request, touched: not again
        self.assertFalse(self.profiler.requested())
        write_request(self.request, "p-7-2", 2, self.out)
        self.assertTrue(self.profiler.requested())
        for step in range(4, 8):
            self.logger.log(step, loss=1.0)
        self.stored("p-7-2")
        ids = [(r["id"], r["status"]) for r in profile_records(self.metrics)]
        self.assertEqual(ids, [("p-7-1", "recording"), ("p-7-1", "stored"),
                               ("p-7-2", "recording"), ("p-7-2", "stored")])

    def test_the_background_thread_notices_the_request(self) -> None:
        self.logger.log(1, loss=1.0)
        write_request(self.request, "p-7-1", 1, self.out)
        # Nobody calls requested(): the logger's thread polls the file.
        wait_until(lambda: self.profiler._pending is not None, what="the logger's poll")
        self.logger.log(2, loss=1.0)
        self.logger.log(3, loss=1.0)
        self.assertEqual(self.stored("p-7-1")["status"], "stored")

    def test_failures_become_failed_records_never_exceptions(self) -> None:
        # The output "directory" is a file: writing the trace fails.
        blocker = os.path.join(self.tmp, "blocker")
        with open(blocker, "w", encoding="utf-8") as f:
            f.write("x")
        write_request(self.request, "p-7-1", 1, blocker)
        self.assertTrue(self.profiler.requested())
        for step in range(1, 4):
            self.logger.log(step, loss=1.0)
        failed = self.stored("p-7-1")
        self.assertEqual(failed["status"], "failed")
        self.assertIn("writing the trace", failed["message"])
        # Steps out of range: failed at once, naming the value.
        write_request(self.request, "p-7-2", 0, self.out)
        self.assertTrue(self.profiler.requested())
        self.logger.log(10, loss=1.0)
        failed = self.stored("p-7-2")
        self.assertIn("steps must be 1..10000, got 0", failed["message"])
        # Not a request at all: ignored (there is no id to answer).
        with open(self.request, "w", encoding="utf-8") as f:
            f.write("{not json")
        self.assertFalse(self.profiler.requested())

    def test_close_stores_what_a_recording_has(self) -> None:
        write_request(self.request, "p-7-1", 100, self.out)
        self.assertTrue(self.profiler.requested())
        for step in range(1, 4):
            self.logger.log(step, loss=1.0)
        self.logger.close(timeout=10)
        stored = [r for r in profile_records(self.metrics) if r["status"] == "stored"]
        self.assertEqual(len(stored), 1)
        with open(stored[0]["path"], encoding="ascii") as f:
            trace = json.load(f)
        self.assertEqual(trace["otherData"]["steps"], 2)
        self.assertEqual(trace["otherData"]["steps_asked"], 100)


class EnvTest(unittest.TestCase):
    def test_profiler_from_env(self) -> None:
        self.assertIsNone(profiler_from_env({}))
        p = profiler_from_env({"TRAINYARD_PROFILE_FILE": "/x/req.json", "RANK": "2"})
        assert p is not None
        self.assertEqual(p.request_file, "/x/req.json")
        self.assertEqual(p._rank, 2)

    def test_the_default_logger_answers_in_a_child_process(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            request = os.path.join(tmp, "req.json")
            metrics = os.path.join(tmp, "m.jsonl")
            write_request(request, "p-1-1", 2, os.path.join(tmp, "out"))
            script = textwrap.dedent("""
                import time, trainyard
                assert trainyard.profile_requested()
                for step in range(1, 5):
                    trainyard.log(step=step, loss=1.0)
                    time.sleep(0.01)
                assert not trainyard.profile_requested()
            """)
            subprocess.run([PYTHON, "-c", script], check=True, timeout=60,
                           env=child_env(TRAINYARD_PROFILE_FILE=request,
                                         TRAINYARD_METRICS_FILE=metrics, RANK="1",
                                         TRAINYARD_LOG_ENVIRONMENT="0"))
            got = profile_records(metrics)
            self.assertEqual([r["status"] for r in got], ["recording", "stored"], got)
            self.assertEqual(got[1]["rank"], 1)
            with open(got[1]["path"], encoding="ascii") as f:
                names = [e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "step"]
            self.assertEqual(names, ["step 2", "step 3"])

    def test_without_the_variable_there_is_no_profiler(self) -> None:
        script = "import trainyard; assert not trainyard.profile_requested(); " \
                 "assert trainyard.default_logger().profiler is None"
        subprocess.run([PYTHON, "-c", script], check=True, timeout=60, env=child_env())


def _torch_available() -> bool:
    return subprocess.run([PYTHON, "-c", "import torch.profiler"], capture_output=True,
                          timeout=120, env=child_env()).returncode == 0


@unittest.skipUnless(_torch_available(), "this python has no torch")
class TorchTest(unittest.TestCase):
    """With torch imported by the job: torch.profiler, stepped at each log call. In a
    child process, so that this one never imports torch."""

    def test_torch_profiler_is_stepped_and_its_trace_stored(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            request = os.path.join(tmp, "req.json")
            metrics = os.path.join(tmp, "m.jsonl")
            write_request(request, "p-1-1", 3, os.path.join(tmp, "out"))
            script = textwrap.dedent("""
                import json, sys, torch, torch.profiler
                steps = []
                class Counting(torch.profiler.profile):
                    def step(self):
                        steps.append(1)
                        super().step()
                torch.profiler.profile = Counting
                import trainyard
                assert trainyard.profile_requested()
                x = torch.randn(32, 32)
                for step in range(1, 7):
                    y = x @ x  # a tiny CPU workload for the profiler to see
                    trainyard.log(step=step, loss=float(y.sum()))
                trainyard.flush()
                print(json.dumps({"steps": len(steps)}))
            """)
            out = subprocess.run([PYTHON, "-c", script], check=True, timeout=120,
                                 capture_output=True, text=True,
                                 env=child_env(TRAINYARD_PROFILE_FILE=request,
                                               TRAINYARD_METRICS_FILE=metrics,
                                               TRAINYARD_LOG_ENVIRONMENT="0"))
            self.assertEqual(json.loads(out.stdout.strip().splitlines()[-1]), {"steps": 3})
            got = profile_records(metrics)
            self.assertEqual([(r["status"], r.get("mode")) for r in got],
                             [("recording", "torch"), ("stored", "torch")], got)
            with open(got[1]["path"], encoding="utf-8") as f:
                trace = json.load(f)
            events = trace["traceEvents"] if isinstance(trace, dict) else trace
            self.assertTrue(any("mm" in e.get("name", "") for e in events),
                            [e.get("name") for e in events][:20])


if __name__ == "__main__":
    unittest.main()
