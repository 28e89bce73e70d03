"""End to end: two DDP ranks on loopback, preempted through one rank, then resumed.

The ranks are launched the way the agent launches them: one process per rank, with
MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK/LOCAL_RANK and the TRAINYARD_* variables set.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "train_ddp.py")
SDK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))),
                       "sdk", "python")
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is only visible to this one
EXIT_PREEMPTED = 75
TIMEOUT_S = 120  # bounds a hang; each run takes a few seconds
STEPS = 120


@functools.cache
def torch_missing() -> str | None:
    """Why the test cannot run, or None if /usr/bin/python3 can import torch."""
    if not os.path.exists(PYTHON):
        return f"{PYTHON} does not exist"
    probe = subprocess.run([PYTHON, "-c", "import torch, torch.distributed as d; "
                            "assert d.is_gloo_available()"], capture_output=True, text=True)
    if probe.returncode != 0:
        return (f"`import torch` (with gloo) fails under {PYTHON}: "
                f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else '?'}; "
                "install python3-torch (scripts/setup does)")
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_records(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


class DdpTest(unittest.TestCase):
    def setUp(self) -> None:
        reason = torch_missing()
        if reason:
            self.skipTest(reason)
        self.tmp = tempfile.mkdtemp(prefix="ddp-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def launch(self, attempt: int, port: int, resume_from: str, *args: str
               ) -> list[subprocess.Popen]:
        """Starts both ranks of one attempt; rank 1's stdout is piped, rank 0's logged."""
        children = []
        for rank in range(2):
            env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
            env.update({
                "PYTHONPATH": SDK_DIR, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
                "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                "WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "CUDA_VISIBLE_DEVICES": "",
                "TRAINYARD_JOB_ID": "7", "TRAINYARD_ATTEMPT": str(attempt),
                "TRAINYARD_CHECKPOINT_DIR": os.path.join(self.tmp, "ckpt"),
                "TRAINYARD_RESUME_FROM": resume_from,
                "TRAINYARD_PREEMPT_FILE": os.path.join(self.tmp, f"preempt-{attempt}-{rank}"),
                "TRAINYARD_METRICS_FILE": self.metrics(attempt, rank),
            })
            log = open(os.path.join(self.tmp, f"out-{attempt}-{rank}.log"), "w")
            self.addCleanup(log.close)
            children.append(subprocess.Popen(
                [PYTHON, SCRIPT, "--steps", str(STEPS), *args], env=env, text=True,
                stdout=subprocess.PIPE if rank == 1 else log, stderr=subprocess.STDOUT))
        for child in children:
            self.addCleanup(child.wait)
            self.addCleanup(child.kill)
        return children

    def metrics(self, attempt: int, rank: int) -> str:
        return os.path.join(self.tmp, f"metrics-{attempt}-{rank}.jsonl")

    def output(self, attempt: int, rank: int) -> str:
        with open(os.path.join(self.tmp, f"out-{attempt}-{rank}.log")) as f:
            return f.read()

    def test_two_ranks_preempt_resume_and_converge(self) -> None:
        # Attempt 1: slowed down so the notice lands mid-run; only rank 1 gets it, so
        # rank 0 learns of it through the all-reduce.
        children = self.launch(1, free_port(), "", "--step-time", "0.05", "--log-every", "1")
        rank1_out = []
        assert children[1].stdout is not None
        for line in children[1].stdout:
            rank1_out.append(line)
            if "step 10/" in line:
                children[1].send_signal(signal.SIGUSR1)
                break
        rank1_out.extend(children[1].stdout)
        statuses = [c.wait(timeout=TIMEOUT_S) for c in children]
        self.assertEqual(statuses, [EXIT_PREEMPTED] * 2,
                         f"rank 0:\n{self.output(1, 0)}\nrank 1:\n{''.join(rank1_out)}")
        [saved] = [r for r in read_records(self.metrics(1, 0)) if r["kind"] == "checkpoint"]
        stopped = saved["step"]
        self.assertTrue(10 <= stopped < 50, stopped)
        self.assertTrue(os.path.isfile(saved["path"]))
        self.assertFalse([r for r in read_records(self.metrics(1, 1))
                          if r["kind"] == "checkpoint"], "only rank 0 checkpoints")

        # Attempt 2: resumes from the control plane's pointer and runs to the end.
        children = self.launch(2, free_port(), saved["path"])
        assert children[1].stdout is not None
        rank1_out = children[1].stdout.read()
        statuses = [c.wait(timeout=TIMEOUT_S) for c in children]
        self.assertEqual(statuses, [0, 0],
                         f"rank 0:\n{self.output(2, 0)}\nrank 1:\n{rank1_out}")
        for out in (self.output(2, 0), rank1_out):
            self.assertIn(f"resumed from {saved['path']} at step {stopped}", out)
        second = read_records(self.metrics(2, 0))
        steps = [r["step"] for r in second if r["kind"] == "metrics"]
        self.assertEqual(steps, list(range(stopped + 1, STEPS + 1)))
        self.assertEqual([r["step"] for r in second if r["kind"] == "checkpoint"][-1], STEPS)
        self.assertTrue(os.path.isfile(os.path.join(self.tmp, "ckpt", f"step-{STEPS:08d}.ckpt")))

        loss = {r["step"]: r["metrics"]["loss"]
                for r in read_records(self.metrics(1, 0)) + second if r["kind"] == "metrics"}
        first10 = sum(loss[s] for s in range(1, 11)) / 10
        last10 = sum(loss[s] for s in range(STEPS - 9, STEPS + 1)) / 10
        self.assertLess(last10, 0.3 * first10, f"loss did not fall: {first10} -> {last10}")


if __name__ == "__main__":
    unittest.main()
