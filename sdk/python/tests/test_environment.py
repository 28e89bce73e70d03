"""The env.* params: their content, when the logger writes them, and the opt-out."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import types
import unittest
from unittest import mock

import trainyard
from trainyard import environment, records
from trainyard.logger import MetricsLogger

from support import PYTHON, ListSink, child_env

FAKE_ENV = {"env.python": "3.99.0", "env.packages": 3}


def parsed(sink: ListSink) -> list[dict]:
    return [records.parse_line(line) for line in sink.lines]


class ContentTest(unittest.TestCase):
    def test_params_describe_this_interpreter_and_its_packages(self) -> None:
        with mock.patch.dict(sys.modules):
            sys.modules.pop("torch", None)
            params = environment.environment_params()
        # Computed independently, through importlib.metadata's own (email) parser.
        lines = set()
        for dist in importlib.metadata.distributions():
            name, version = dist.metadata["Name"], dist.version
            if name and version:
                lines.add(re.sub(r"[-_.]+", "-", name).lower() + "==" + version)
        expected_sha = hashlib.sha256(
            "".join(line + "\n" for line in sorted(lines)).encode()).hexdigest()
        self.assertEqual(params, {
            "env.python": platform.python_version(),
            "env.python_implementation": platform.python_implementation(),
            "env.platform": f"{sys.platform}-{platform.machine()}",
            "env.packages_sha256": expected_sha,
            "env.packages": len(lines),
        })
        self.assertRegex(params["env.packages_sha256"], r"^[0-9a-f]{64}$")
        # Valid as params, and stable from one call to the next.
        records.params_record(0, params)
        with mock.patch.dict(sys.modules):
            sys.modules.pop("torch", None)
            self.assertEqual(environment.environment_params(), params)

    def test_names_are_normalised(self) -> None:
        self.assertEqual(environment.normalize_name("Typing_Extensions"), "typing-extensions")
        self.assertEqual(environment.normalize_name("zope.interface"), "zope-interface")
        self.assertEqual(environment.normalize_name("a__-b"), "a-b")

    def test_torch_and_cuda_come_from_an_already_imported_torch(self) -> None:
        fake = types.ModuleType("torch")
        fake.__version__ = "2.3.1+cu121"  # type: ignore[attr-defined]
        fake.version = types.SimpleNamespace(cuda="12.1")  # type: ignore[attr-defined]
        with mock.patch.dict(sys.modules, {"torch": fake}):
            params = environment.environment_params()
        self.assertEqual(params["env.torch"], "2.3.1+cu121")
        self.assertEqual(params["env.cuda"], "12.1")
        cpu = types.ModuleType("torch")
        cpu.__version__ = "2.3.1+cpu"  # type: ignore[attr-defined]
        cpu.version = types.SimpleNamespace(cuda=None)  # type: ignore[attr-defined]
        with mock.patch.dict(sys.modules, {"torch": cpu}):
            params = environment.environment_params()
        self.assertEqual(params["env.torch"], "2.3.1+cpu")
        self.assertNotIn("env.cuda", params)

    def test_never_imports_torch(self) -> None:
        if "torch" in sys.modules:
            self.skipTest("torch is already imported in this process")
        params = environment.environment_params()
        self.assertNotIn("torch", sys.modules)
        self.assertNotIn("env.torch", params)

    def test_the_opt_out_variable(self) -> None:
        for value in ("0", "false", "No", " off "):
            self.assertFalse(environment.enabled_by_env({"TRAINYARD_LOG_ENVIRONMENT": value}))
        for env in ({}, {"TRAINYARD_LOG_ENVIRONMENT": "1"},
                    {"TRAINYARD_LOG_ENVIRONMENT": ""}):
            self.assertTrue(environment.enabled_by_env(env))


class LoggerTest(unittest.TestCase):
    def logger(self, sink: ListSink, **options: object) -> MetricsLogger:
        options.setdefault("environment", lambda: dict(FAKE_ENV))
        logger = MetricsLogger(sink, flush_interval_s=3600, clock_ms=lambda: 7,
                               register_atexit=False, **options)  # type: ignore[arg-type]
        self.addCleanup(logger.close)
        return logger

    def test_merged_into_a_first_params_record(self) -> None:
        sink = ListSink()
        logger = self.logger(sink, log_environment=True)
        logger.log_params({"lr": 0.1, "env.python": "mine"})  # the job's value wins
        logger.log(1, loss=1.0)
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(parsed(sink)[0], {"kind": "params", "time_ms": 7, "params": {
            "env.python": "mine", "env.packages": 3, "lr": 0.1}})
        self.assertEqual(len(sink.lines), 2)

    def test_a_record_of_their_own_before_the_first_metrics(self) -> None:
        sink = ListSink()
        logger = self.logger(sink, log_environment=True)
        logger.log(1, loss=1.0)
        logger.log_params({"lr": 0.1})
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual([r["kind"] for r in parsed(sink)], ["params", "metrics", "params"])
        self.assertEqual(parsed(sink)[0]["params"], FAKE_ENV)
        logger.log(2, loss=1.0)  # once per logger
        logger.log_environment()
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual([r["kind"] for r in parsed(sink)][3:], ["metrics"])

    def test_off_unless_asked_and_log_environment_asks(self) -> None:
        calls = []
        sink = ListSink()
        logger = self.logger(sink, environment=lambda: calls.append(1) or dict(FAKE_ENV))
        logger.log(1, loss=1.0)
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(calls, [])
        logger.log_environment()
        logger.log_environment()
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(calls, [1])
        self.assertEqual(parsed(sink)[1], {"kind": "params", "time_ms": 7, "params": FAKE_ENV})

    def test_log_does_not_wait_for_them(self) -> None:
        gate, entered = threading.Event(), threading.Event()
        collector = []

        def slow_environment() -> dict[str, object]:
            collector.append(threading.current_thread().name)
            entered.set()
            gate.wait()
            return dict(FAKE_ENV)

        sink = ListSink()
        logger = self.logger(sink, log_environment=True, environment=slow_environment)
        logger.log(0, loss=0.0)
        self.assertTrue(entered.wait(10), "the environment was never collected")
        done = threading.Event()

        def loop() -> None:
            for step in range(1, 2001):
                logger.log(step, loss=float(step))
            done.set()

        threading.Thread(target=loop, daemon=True).start()
        # The collector is blocked; if log() waited for it this would never finish.
        self.assertTrue(done.wait(10), "log() waited for the env.* params")
        self.assertEqual(collector, ["trainyard-metrics-flusher"])
        self.assertFalse(logger.flush(timeout=0.05), "flush() should wait for them")
        gate.set()
        self.assertTrue(logger.flush(timeout=10))
        kinds = [r["kind"] for r in parsed(sink)]
        self.assertEqual(kinds, ["params"] + ["metrics"] * 2001)

    def test_a_failure_is_reported_and_skipped(self) -> None:
        def broken() -> dict[str, object]:
            raise RuntimeError("metadata is unreadable")

        sink = ListSink()
        logger = self.logger(sink, log_environment=True, environment=broken)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            logger.log(1, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))
        self.assertEqual([r["kind"] for r in parsed(sink)], ["metrics"])
        self.assertIn("could not collect the env.* params", err.getvalue())
        self.assertIn("metadata is unreadable", err.getvalue())

    def test_module_function(self) -> None:
        sink = ListSink()
        trainyard.configure(sink=sink, log_environment=False)
        try:
            trainyard.log_environment()
            self.assertTrue(trainyard.flush(timeout=10))
            self.assertEqual(len(sink.lines), 1)
            self.assertEqual(parsed(sink)[0]["params"]["env.python"],
                             platform.python_version())
        finally:
            trainyard.configure(sink=ListSink(), log_environment=False)


class OptOutTest(unittest.TestCase):
    def run_child(self, **env: str) -> list[dict]:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.jsonl")
            code = "import trainyard\ntrainyard.log_params({'lr': 0.1})\n" \
                   "trainyard.log(step=1, loss=1.0)\n"
            subprocess.run([PYTHON, "-c", code], check=True, timeout=60,
                           env=child_env(TRAINYARD_METRICS_FILE=path, **env))
            with open(path, "rb") as f:
                return [records.parse_line(line) for line in f]

    def test_on_by_default_off_with_zero(self) -> None:
        on = self.run_child()
        self.assertEqual(len(on), 2)
        self.assertEqual(on[0]["params"]["lr"], 0.1)
        self.assertEqual(on[0]["params"]["env.python"], platform.python_version())
        off = self.run_child(TRAINYARD_LOG_ENVIRONMENT="0")
        self.assertEqual(off[0], {"kind": "params", "time_ms": off[0]["time_ms"],
                                  "params": {"lr": 0.1}})


if __name__ == "__main__":
    unittest.main()
