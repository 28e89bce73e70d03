"""The example trainer run as the agent runs it: a child process with Trainyard's env."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import statistics
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(os.path.dirname(HERE), "trainer.py")
SDK_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))),
                       "sdk", "python")
EXIT_PREEMPTED = 75
TIMEOUT_S = 60  # bounds a hang; a passing run takes about a second


def job_env(tmp: str, name: str, **extra: str) -> dict[str, str]:
    """The variables the agent would set, pointing into `tmp`."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRAINYARD_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update({
        "PYTHONPATH": SDK_DIR, "PYTHONUNBUFFERED": "1",
        "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "TRAINYARD_JOB_ID": "17", "TRAINYARD_ATTEMPT": "1",
        "TRAINYARD_CHECKPOINT_DIR": os.path.join(tmp, "ckpt"),
        "TRAINYARD_METRICS_FILE": os.path.join(tmp, f"{name}.jsonl"),
        "TRAINYARD_PREEMPT_FILE": os.path.join(tmp, f"{name}.preempt"),
        "TRAINYARD_RESUME_FROM": "",
    })
    env.update(extra)
    return env


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, TRAINER, *args], env=env, capture_output=True,
                          text=True, timeout=TIMEOUT_S)


def read_records(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def losses(records: list[dict]) -> dict[int, float]:
    return {r["step"]: r["metrics"]["loss"] for r in records
            if r["kind"] == "metrics" and "loss" in r["metrics"]}


def checkpoints(records: list[dict]) -> list[dict]:
    return [r for r in records if r["kind"] == "checkpoint"]


def metrics_by_step(records: list[dict]) -> dict[int, dict]:
    """The training step metrics (those with a loss) by step."""
    return {r["step"]: r["metrics"] for r in records
            if r["kind"] == "metrics" and "loss" in r["metrics"]}


def write_atomically(path: str, text: str) -> None:
    """As the agent writes its files: whole, through a rename."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def read_checkpoint(path: str) -> tuple[int, object]:
    """(step, state) of a checkpoint file, read by the SDK next door."""
    if SDK_DIR not in sys.path:
        sys.path.insert(0, SDK_DIR)
    from trainyard.checkpoint import read_checkpoint as read
    return read(path)


class TrainerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="trainer-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def preempt_mid_run(self, env: dict[str, str], notify, at_step: int, *args: str
                        ) -> tuple[int, str]:
        """Starts the trainer, calls notify(child) once it printed `at_step`, returns
        (exit status, stdout)."""
        with subprocess.Popen([sys.executable, TRAINER, *args], env=env, text=True,
                              stdout=subprocess.PIPE) as child:
            try:
                assert child.stdout is not None
                seen = []
                for line in child.stdout:
                    seen.append(line)
                    if f" step {at_step}/" in line:
                        notify(child)
                        break
                seen.extend(child.stdout)
                return child.wait(timeout=TIMEOUT_S), "".join(seen)
            finally:
                child.kill()

    def test_runs_logs_and_checkpoints(self) -> None:
        env = job_env(self.tmp, "run")
        result = run(env, "--steps", "60", "--checkpoint-every", "20")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("rank 0 step 60/60", result.stdout)
        records = read_records(env["TRAINYARD_METRICS_FILE"])
        metrics = [r for r in records if r["kind"] == "metrics" and "loss" in r["metrics"]]
        self.assertEqual([r["step"] for r in metrics], list(range(1, 61)))
        for key in ("loss", "grad_norm", "lr", "step_time_s", "tokens_per_s"):
            self.assertIn(key, metrics[-1]["metrics"])
        by_step = losses(records)
        self.assertLess(sum(by_step[s] for s in range(51, 61)),
                        0.5 * sum(by_step[s] for s in range(1, 11)), "loss should fall")
        # A save made while the previous one is still being written replaces the pending
        # one (coalescing), so which of 20 and 40 reach the disk depends on fsync speed;
        # the final checkpoint always does.
        saved = [c["step"] for c in checkpoints(records)]
        self.assertEqual(saved[-1], 60)
        self.assertEqual(saved, sorted(set(saved) & {20, 40, 60}))
        self.assertEqual([r["kind"] for r in records].count("params"), 1)
        on_disk = sorted(n for n in os.listdir(env["TRAINYARD_CHECKPOINT_DIR"])
                         if n.endswith(".ckpt"))
        self.assertEqual(on_disk, [f"step-{s:08d}.ckpt" for s in saved])

    def test_preempted_by_signal_then_resumed_continues_exactly(self) -> None:
        steps = ["--steps", "120", "--checkpoint-every", "50"]
        reference = job_env(self.tmp, "reference",
                            TRAINYARD_CHECKPOINT_DIR=os.path.join(self.tmp, "ref-ckpt"))
        self.assertEqual(run(reference, *steps).returncode, 0)
        expected = losses(read_records(reference["TRAINYARD_METRICS_FILE"]))

        # --step-time leaves the signal ample time to land long before step 120.
        first = job_env(self.tmp, "first")
        status, out = self.preempt_mid_run(
            first, lambda child: child.send_signal(signal.SIGUSR1), 5,
            *steps, "--step-time", "0.05")
        self.assertEqual(status, EXIT_PREEMPTED, out)
        self.assertIn("preempted at step", out)
        [saved] = checkpoints(read_records(first["TRAINYARD_METRICS_FILE"]))
        stopped = saved["step"]
        self.assertGreaterEqual(stopped, 5)
        self.assertLess(stopped, 50)
        self.assertTrue(os.path.isfile(saved["path"]))

        second = job_env(self.tmp, "second", TRAINYARD_ATTEMPT="2",
                         TRAINYARD_RESUME_FROM=saved["path"])
        result = run(second, *steps)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"resumed from {saved['path']} at step {stopped}", result.stdout)
        resumed = losses(read_records(second["TRAINYARD_METRICS_FILE"]))
        self.assertEqual(min(resumed), stopped + 1)
        # Same data, same weights, same schedule: the very same losses, bit for bit.
        self.assertEqual(resumed, {s: expected[s] for s in range(stopped + 1, 121)})

    def test_preempted_by_file(self) -> None:
        env = job_env(self.tmp, "file")

        def write_notice(child: subprocess.Popen) -> None:
            with open(env["TRAINYARD_PREEMPT_FILE"], "w") as f:
                json.dump({"deadline_ms": int(time.time() * 1000) + 60000, "signal": 10,
                           "grace_ms": 60000}, f)

        status, out = self.preempt_mid_run(env, write_notice, 3, "--steps", "200",
                                           "--step-time", "0.05")
        self.assertEqual(status, EXIT_PREEMPTED, out)
        [saved] = checkpoints(read_records(env["TRAINYARD_METRICS_FILE"]))
        self.assertGreaterEqual(saved["step"], 3)

    def test_fail_at_step_exits_non_zero_and_a_retry_resumes(self) -> None:
        env = job_env(self.tmp, "fail")
        result = run(env, "--steps", "40", "--checkpoint-every", "10", "--fail-at-step", "25")
        self.assertEqual(result.returncode, 1)
        self.assertIn("simulated failure at step 25", result.stderr)
        self.assertNotIn("step 25/", result.stdout)
        retry = job_env(self.tmp, "retry", TRAINYARD_ATTEMPT="2")  # resume via `latest`
        result = run(retry, "--steps", "40", "--checkpoint-every", "10")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("at step 20", result.stdout)
        self.assertEqual(min(losses(read_records(retry["TRAINYARD_METRICS_FILE"]))), 21)

    def test_two_ranks_agree_and_only_rank_0_checkpoints(self) -> None:
        ranks = [job_env(self.tmp, f"rank-{r}", RANK=str(r), WORLD_SIZE="2",
                         TRAINYARD_CHECKPOINT_DIR=os.path.join(self.tmp, f"ckpt-{r}"))
                 for r in range(2)]
        children = [subprocess.Popen([sys.executable, TRAINER, "--steps", "30"], env=env,
                                     stdout=subprocess.DEVNULL) for env in ranks]
        for child in children:
            self.assertEqual(child.wait(timeout=TIMEOUT_S), 0)
        rank0, rank1 = (read_records(env["TRAINYARD_METRICS_FILE"]) for env in ranks)
        self.assertEqual(losses(rank0), losses(rank1))
        self.assertEqual([c["step"] for c in checkpoints(rank0)], [30])
        self.assertEqual(checkpoints(rank1), [])
        self.assertFalse(any(n.endswith(".ckpt") for n in os.listdir(ranks[1]
                                                                    ["TRAINYARD_CHECKPOINT_DIR"])))

    def test_runs_standalone_without_trainyard_env(self) -> None:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TRAINYARD_") and k not in ("RANK", "WORLD_SIZE")}
        env.pop("PYTHONPATH", None)  # the trainer finds the SDK in the checkout
        env["TMPDIR"] = self.tmp
        result = subprocess.run([sys.executable, TRAINER, "--steps", "20"], env=env,
                                capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 0, result.stderr)
        match = re.search(r"metrics in (\S+)", result.stdout)
        assert match is not None, result.stdout
        self.assertEqual(sorted(losses(read_records(match.group(1)))), list(range(1, 21)))

    # ---- injected faults (docs/faults.md) and checkpoint requests ----

    def fault_env(self, name: str, effects: dict | None = None, **extra: str) -> dict[str, str]:
        """A job env whose TRAINYARD_FAULT_FILE holds `effects` (as the agent writes it)."""
        env = job_env(self.tmp, name,
                      TRAINYARD_CHECKPOINT_DIR=os.path.join(self.tmp, f"{name}-ckpt"),
                      TRAINYARD_FAULT_FILE=os.path.join(self.tmp, f"{name}.faults.json"),
                      TRAINYARD_CHECKPOINT_REQUEST_FILE=os.path.join(self.tmp, f"{name}.request"),
                      **extra)
        if effects is not None:
            write_atomically(env["TRAINYARD_FAULT_FILE"], json.dumps(effects))
        return env

    def test_training_faults_change_what_is_logged_never_the_model(self) -> None:
        steps = ["--steps", "20", "--checkpoint-every", "0"]
        reference = self.fault_env("clean")
        self.assertEqual(run(reference, *steps).returncode, 0)
        faulty = self.fault_env("faulty", {"slow_factor": 1.0, "hang": False,
                                           "data_stall_s": 0.02, "loss_nan": True,
                                           "grad_spike": True})
        result = run(faulty, *steps)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("loss nan", result.stdout)
        want = metrics_by_step(read_records(reference["TRAINYARD_METRICS_FILE"]))
        got = metrics_by_step(read_records(faulty["TRAINYARD_METRICS_FILE"]))
        self.assertEqual(sorted(got), list(range(1, 21)))
        for step, m in got.items():
            self.assertEqual(m["loss"], "NaN", step)  # how the metrics file spells NaN
            self.assertEqual(m["grad_norm"], want[step]["grad_norm"] * 100.0, step)
            self.assertGreaterEqual(m["data_wait_s"], 0.02, step)
            self.assertGreaterEqual(m["step_time_s"], m["data_wait_s"], step)
        # The clean run has no stall: its typical wait is well below the faulty one's (a
        # median, not each step: on a busy machine one step may wait 20 ms on its own).
        clean_waits = statistics.median(m["data_wait_s"] for m in want.values())
        faulty_waits = statistics.median(m["data_wait_s"] for m in got.values())
        self.assertLess(clean_waits, faulty_waits - 0.01, (clean_waits, faulty_waits))
        # The weights are those of the clean run: clearing the fault leaves no trace.
        [clean_ckpt] = checkpoints(read_records(reference["TRAINYARD_METRICS_FILE"]))
        [faulty_ckpt] = checkpoints(read_records(faulty["TRAINYARD_METRICS_FILE"]))
        self.assertEqual(read_checkpoint(faulty_ckpt["path"]),
                         read_checkpoint(clean_ckpt["path"]))

    def test_slow_factor_stretches_every_step(self) -> None:
        env = self.fault_env("slow", {"slow_factor": 3.0})
        result = run(env, "--steps", "5", "--step-time", "0.02")
        self.assertEqual(result.returncode, 0, result.stderr)
        got = metrics_by_step(read_records(env["TRAINYARD_METRICS_FILE"]))
        for step, m in got.items():
            self.assertGreaterEqual(m["step_time_s"], 0.06, step)

    def watch(self, env: dict[str, str], actions: dict[str, object], *args: str
              ) -> tuple[int, str]:
        """Runs the trainer; when a line contains a key of `actions`, calls its action
        (once). Returns (exit status, stdout)."""
        pending = dict(actions)
        with subprocess.Popen([sys.executable, TRAINER, *args], env=env, text=True,
                              stdout=subprocess.PIPE) as child:
            try:
                assert child.stdout is not None
                seen = []
                for line in child.stdout:
                    seen.append(line)
                    for key in [k for k in pending if k in line]:
                        pending.pop(key)(child)  # type: ignore[operator]
                return child.wait(timeout=TIMEOUT_S), "".join(seen)
            finally:
                child.kill()

    def test_a_hung_trainer_does_not_step_until_the_hang_ends(self) -> None:
        env = self.fault_env("hang", {"hang": True})

        def while_hung(child: subprocess.Popen) -> None:
            self.assertFalse(os.path.exists(env["TRAINYARD_METRICS_FILE"])
                             and any(r["kind"] == "metrics" and "loss" in r["metrics"]
                                     for r in read_records(env["TRAINYARD_METRICS_FILE"])))
            write_atomically(env["TRAINYARD_FAULT_FILE"], json.dumps({"hang": False}))

        status, out = self.watch(env, {"hung before step 1": while_hung}, "--steps", "5")
        self.assertEqual(status, 0, out)
        self.assertLess(out.index("hung before step 1"), out.index("no longer hung"))
        self.assertLess(out.index("no longer hung"), out.index("step 1/5"))
        self.assertEqual(sorted(losses(read_records(env["TRAINYARD_METRICS_FILE"]))),
                         [1, 2, 3, 4, 5])

    def test_a_hung_trainer_can_still_be_preempted(self) -> None:
        env = self.fault_env("hang-preempt")

        def hang(child: subprocess.Popen) -> None:
            write_atomically(env["TRAINYARD_FAULT_FILE"], json.dumps({"hang": True}))

        status, out = self.watch(
            env, {" step 3/": hang, "hung before step": lambda c: c.send_signal(signal.SIGUSR1)},
            "--steps", "200", "--step-time", "0.02", "--checkpoint-every", "0")
        self.assertEqual(status, EXIT_PREEMPTED, out)
        [saved] = checkpoints(read_records(env["TRAINYARD_METRICS_FILE"]))
        hung_at = int(re.search(r"hung before step (\d+)", out).group(1))  # type: ignore[union-attr]
        self.assertEqual(saved["step"], hung_at - 1, "the last step it completed")

    def test_a_checkpoint_request_saves_the_current_step(self) -> None:
        env = self.fault_env("request")

        def request(child: subprocess.Popen) -> None:
            write_atomically(env["TRAINYARD_CHECKPOINT_REQUEST_FILE"], "1\n")

        def finish(child: subprocess.Popen) -> None:
            write_atomically(env["TRAINYARD_PREEMPT_FILE"], json.dumps(
                {"deadline_ms": int(time.time() * 1000) + 60000, "signal": 10,
                 "grace_ms": 60000}))

        status, out = self.watch(env, {" step 5/": request, "checkpoint requested": finish},
                                 "--steps", "200", "--step-time", "0.02",
                                 "--checkpoint-every", "0")
        self.assertEqual(status, EXIT_PREEMPTED, out)
        asked_at = int(re.search(r"checkpoint requested at step (\d+)", out).group(1))  # type: ignore[union-attr]
        self.assertGreaterEqual(asked_at, 5)
        saved = [c["step"] for c in checkpoints(read_records(env["TRAINYARD_METRICS_FILE"]))]
        self.assertEqual(saved[0], asked_at)
        self.assertEqual(out.count("checkpoint requested"), 1, "one request, one checkpoint")

    def test_bad_arguments_exit_2(self) -> None:
        result = run(job_env(self.tmp, "bad"), "--steps", "0")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--steps: must be >= 1, got 0", result.stderr)


if __name__ == "__main__":
    unittest.main()
