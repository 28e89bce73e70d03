"""End to end: two DDP ranks on loopback, preempted through one rank, then resumed.

The ranks are launched the way the agent launches them: one process per rank, with
MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK/LOCAL_RANK and the TRAINYARD_* variables set.
"""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
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
    """A free port below the kernel's ephemeral range, as the server's MASTER_PORT is
    (20000-31999). One inside it may become rank 1's own local port while rank 1 retries
    connecting before rank 0 listens (a TCP self-connect): rank 0 then finds it taken and
    rank 1 waits on itself, which is how this test used to hang on a busy machine."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random(os.getpid())
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port below {low}")


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

    def launch(self, attempt: int, resume_from: str, *args: str) -> list[subprocess.Popen]:
        """Starts both ranks of one attempt, each logging to out-ATTEMPT-RANK.log. The
        master port is picked free and then given up, so another process may still take
        it before rank 0 binds it: then both are stopped and started again on another."""
        tries = []
        for _ in range(3):
            children = self._launch(attempt, free_port(), resume_from, *args)
            deadline = time.monotonic() + TIMEOUT_S
            while time.monotonic() < deadline:
                early = [c for c in children if c.poll() is not None]
                text = self.output(attempt, 0) + self.output(attempt, 1)
                if early and "address already in use" in text.lower():
                    tries.append(text)
                    break  # the port was taken: again, on another
                if early or "step 1/" in text or "resumed from" in text:
                    return children
                time.sleep(0.05)
            else:
                return children  # wait() below bounds it and says what happened
            for c in children:
                c.kill()
                c.wait()
        self.fail("the master port was taken three times running:\n" + "\n---\n".join(tries))

    def _launch(self, attempt: int, port: int, resume_from: str, *args: str
                ) -> list[subprocess.Popen]:
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
                stdout=log, stderr=subprocess.STDOUT))
        for child in children:
            self.addCleanup(child.wait)
            self.addCleanup(child.kill)
        return children

    def wait_all(self, attempt: int, children: list[subprocess.Popen]) -> list[int]:
        """Their exit statuses; a rank still running after TIMEOUT_S fails the test with
        both ranks' output rather than hanging it."""
        try:
            return [c.wait(timeout=TIMEOUT_S) for c in children]
        except subprocess.TimeoutExpired:
            for c in children:
                c.kill()
            self.fail(f"attempt {attempt} still running after {TIMEOUT_S} s:\n"
                      f"rank 0:\n{self.output(attempt, 0)}\nrank 1:\n{self.output(attempt, 1)}")

    def metrics(self, attempt: int, rank: int) -> str:
        return os.path.join(self.tmp, f"metrics-{attempt}-{rank}.jsonl")

    def output(self, attempt: int, rank: int) -> str:
        with open(os.path.join(self.tmp, f"out-{attempt}-{rank}.log")) as f:
            return f.read()

    def test_two_ranks_preempt_resume_and_converge(self) -> None:
        # Attempt 1: slowed down so the notice lands mid-run; only rank 1 gets it, so
        # rank 0 learns of it through the all-reduce.
        children = self.launch(1, "", "--step-time", "0.05", "--log-every", "1")
        deadline = time.monotonic() + TIMEOUT_S
        while "step 10/" not in self.output(1, 1):
            if time.monotonic() > deadline or any(c.poll() is not None for c in children):
                for c in children:
                    c.kill()
                self.fail(f"rank 1 did not reach step 10:\nrank 0:\n{self.output(1, 0)}\n"
                          f"rank 1:\n{self.output(1, 1)}")
            time.sleep(0.02)
        children[1].send_signal(signal.SIGUSR1)
        statuses = self.wait_all(1, children)
        self.assertEqual(statuses, [EXIT_PREEMPTED] * 2,
                         f"rank 0:\n{self.output(1, 0)}\nrank 1:\n{self.output(1, 1)}")
        [saved] = [r for r in read_records(self.metrics(1, 0)) if r["kind"] == "checkpoint"]
        stopped = saved["step"]
        self.assertTrue(10 <= stopped < 50, stopped)
        self.assertTrue(os.path.isfile(saved["path"]))
        self.assertFalse([r for r in read_records(self.metrics(1, 1))
                          if r["kind"] == "checkpoint"], "only rank 0 checkpoints")

        # Attempt 2: resumes from the control plane's pointer and runs to the end.
        children = self.launch(2, saved["path"])
        statuses = self.wait_all(2, children)
        self.assertEqual(statuses, [0, 0],
                         f"rank 0:\n{self.output(2, 0)}\nrank 1:\n{self.output(2, 1)}")
        for rank in range(2):
            self.assertIn(f"resumed from {saved['path']} at step {stopped}", self.output(2, rank))
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
