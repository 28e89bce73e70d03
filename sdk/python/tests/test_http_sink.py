"""HttpSink against a local HTTP server: bodies, headers, batching, failures, exit."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import math
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import unittest
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from trainyard import records
from trainyard.http_sink import HttpSink, default_backoff, record_points
from trainyard.logger import FileSink, MetricsLogger, NullSink, sink_from_env

from support import PYTHON, ListSink, child_env, wait_until

TOKEN = "tyt_0123456789abcdef"


class Request(NamedTuple):
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        def strict(name: str) -> None:
            raise AssertionError(f"bare {name} in a JSON body")
        return json.loads(self.body, parse_constant=strict)


class MetricsServer:
    """A ThreadingHTTPServer on 127.0.0.1, port 0, keeping every request. Answers come
    from `answers` (status, JSON), then `default`."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Request] = []
        self.answers: collections.deque[tuple[int, dict[str, Any]]] = collections.deque()
        self.default: tuple[int, dict[str, Any]] = (200, {"points": 0})
        # Close each connection after answering without saying so (an idle timeout).
        self.drop_connections = False
        self.changed = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the real server

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with server.changed:
                    status, answer = server.answers.popleft() if server.answers \
                        else server.default
                    server.requests.append(Request("POST", self.path, dict(self.headers),
                                                   body))
                    server.changed.notify_all()
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if server.drop_connections:
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        # A short poll interval: shutdown() waits for the loop to notice.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.01,),
                                       daemon=True)
        self.thread.start()
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"

    def wait_for(self, count: int) -> list[Request]:
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.requests) >= count, timeout=20):
                raise AssertionError(f"expected {count} requests, got {len(self.requests)}")
            return list(self.requests)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def steps_of(requests: list[Request], key: str = "loss") -> list[int]:
    return [step for r in requests for s in r.json()["series"] if s["key"] == key
            for step in s["steps"]]


@contextlib.contextmanager
def captured_stderr() -> Iterator[io.StringIO]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        yield err


def closed_port() -> int:
    """A port on 127.0.0.1 nobody listens on: connecting is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpSinkTestCase(unittest.TestCase):
    def setUp(self) -> None:
        self.server = MetricsServer()
        self.addCleanup(self.server.close)

    def sink(self, **options: Any) -> HttpSink:
        server = options.pop("server", self.server.url)
        sink = HttpSink(server, TOKEN, options.pop("run", "17"), options.pop("rank", 0),
                        **options)
        return sink

    def logger(self, sink: HttpSink, **options: Any) -> MetricsLogger:
        options.setdefault("flush_interval_s", 3600)  # only flush() writes
        logger = MetricsLogger(sink, clock_ms=lambda: 1764410000000,
                               register_atexit=False, **options)
        self.addCleanup(logger.close, 5)
        return logger


class BodyTest(HttpSinkTestCase):
    def test_body_and_headers_are_exact(self) -> None:
        logger = self.logger(self.sink(rank=3))
        logger.log_params({"lr": 3e-4, "optim": {"name": "adamw"}, "amp": True, "note": None,
                           "clip": math.inf})
        logger.log(1, loss=2.5, lr=3e-4)
        logger.log(2, loss=math.nan, grad_norm=math.inf, tokens=12)
        logger.log_metrics(2, {"eval/loss": -math.inf})
        logger.checkpoint_saved("/ckpt/step-00000002.ckpt", 2, started_ms=1764409998500,
                                duration_ms=1500, bytes=734003200)
        self.assertTrue(logger.flush(timeout=10))
        [request] = self.server.wait_for(1)
        self.assertEqual(request.path, "/api/v1/runs/17/metrics")
        self.assertEqual(request.headers["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(request.headers["Content-Type"], "application/json")
        self.assertEqual(int(request.headers["Content-Length"]), len(request.body))
        t = 1764410000000
        self.assertEqual(request.json(), {
            "rank": 3,
            "series": [
                {"key": "loss", "steps": [1, 2], "values": [2.5, "NaN"], "times_ms": [t, t]},
                {"key": "lr", "steps": [1], "values": [0.0003], "times_ms": [t]},
                {"key": "grad_norm", "steps": [2], "values": ["Infinity"], "times_ms": [t]},
                {"key": "tokens", "steps": [2], "values": [12], "times_ms": [t]},
                {"key": "eval/loss", "steps": [2], "values": ["-Infinity"], "times_ms": [t]},
                {"key": "checkpoint/write_s", "steps": [2], "values": [1.5], "times_ms": [t]},
                {"key": "checkpoint/bytes", "steps": [2], "values": [734003200],
                 "times_ms": [t]},
            ],
            "params": {"lr": 0.0003, "optim.name": "adamw", "amp": True, "note": None,
                       "clip": "Infinity"},
        })
        self.assertIn(b'"values":[2.5,"NaN"]', request.body)
        self.assertEqual(type(request.json()["series"][3]["values"][0]), int)

    def test_urls_and_bad_settings(self) -> None:
        sink = HttpSink("https://ty.example.com:8443/trainyard/", TOKEN, "my run/1")
        self.assertEqual(sink.url,
                         "https://ty.example.com:8443/trainyard/api/v1/runs/my%20run%2F1/metrics")
        self.assertEqual(HttpSink("localhost:8470", TOKEN, "5").url,
                         "http://localhost:8470/api/v1/runs/5/metrics")
        for server, token, run, rank, what in (
                ("ftp://host", TOKEN, "1", 0, "TRAINYARD_SERVER"),
                ("http://", TOKEN, "1", 0, "TRAINYARD_SERVER"),
                ("http://host:99999", TOKEN, "1", 0, "TRAINYARD_SERVER"),
                ("http://host", "", "1", 0, "TRAINYARD_TOKEN"),
                ("http://host", "a\r\nX-Evil: 1", "1", 0, "TRAINYARD_TOKEN"),
                ("http://host", TOKEN, "", 0, "TRAINYARD_RUN"),
                ("http://host", TOKEN, "1", -1, "rank")):
            with self.assertRaisesRegex(ValueError, what):
                HttpSink(server, token, run, rank)
        with self.assertRaisesRegex(ValueError, "TRAINYARD_CA_CERT"):
            HttpSink("https://host", TOKEN, "1", ca_cert="/nonexistent/ca.pem")

    def test_records_become_points(self) -> None:
        self.assertEqual(record_points({"kind": "checkpoint", "time_ms": 5, "path": "/p",
                                        "step": 9}), ([], {}))
        self.assertIsNone(record_points({"kind": "profile", "time_ms": 5}))
        self.assertIsNone(record_points({"kind": "metrics", "time_ms": 5, "step": -1,
                                         "metrics": {"a": 1}}))
        self.assertIsNone(record_points({"kind": "metrics", "time_ms": 5, "step": 1,
                                         "metrics": {"a": True}}))
        self.assertEqual(record_points({"kind": "metrics", "time_ms": 5, "step": 1,
                                        "metrics": {"a": math.nan}}),
                         ([("a", 1, "NaN", 5)], {}))


class BatchingTest(HttpSinkTestCase):
    def test_one_request_per_flush(self) -> None:
        logger = self.logger(self.sink())
        for step in range(1, 201):
            logger.log(step, loss=1.0 / step)
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(len(self.server.requests), 1)
        for step in range(201, 211):
            logger.log(step, loss=1.0 / step)
        self.assertTrue(logger.flush(timeout=10))
        self.assertTrue(logger.flush(timeout=10))  # nothing new: no request
        requests = self.server.wait_for(2)
        self.assertEqual(len(requests), 2)
        self.assertEqual(steps_of(requests[:1]), list(range(1, 201)))
        self.assertEqual(steps_of(requests[1:]), list(range(201, 211)))

    def test_a_connection_the_server_closed_is_replaced_quietly(self) -> None:
        self.server.drop_connections = True
        sink = self.sink(backoff=lambda n: 3600)
        logger = self.logger(sink)
        with captured_stderr() as err:
            for step in range(3):
                logger.log(step, loss=1.0)
                self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(err.getvalue(), "")
        self.assertEqual((sink.sent_lines, sink.kept_lines), (3, 0))
        self.assertEqual(steps_of(self.server.wait_for(3)), [0, 1, 2])
        self.assertEqual(sink.requests, 5, "the 2nd and 3rd found their connection closed")

    def test_the_background_thread_sends(self) -> None:
        threads = []

        class Recording(HttpSink):
            def write_lines(self, lines: Any) -> None:
                threads.append(threading.current_thread().name)
                super().write_lines(lines)

        sink = Recording(self.server.url, TOKEN, "17")
        logger = self.logger(sink, flush_interval_s=0.01)
        logger.log(1, loss=1.0)
        self.server.wait_for(1)
        self.assertEqual(threads, ["trainyard-metrics-flusher"])

    def test_large_batches_are_split_within_the_servers_limits(self) -> None:
        logger = self.logger(self.sink(max_request_bytes=4000))
        for step in range(300):
            logger.log(step, loss=float(step))
        for step in range(3):  # 600 new keys each: at most 1,000 keys per request
            logger.log_metrics(step, {f"k{step}_{i}": 1.0 for i in range(600)})
        self.assertTrue(logger.flush(timeout=10))
        requests = list(self.server.requests)
        self.assertGreater(len(requests), 3)
        for r in requests:
            self.assertLessEqual(len({s["key"] for s in r.json()["series"]}), 1000)
        self.assertEqual(steps_of(requests), list(range(300)))
        self.assertEqual(sum(len(s["steps"]) for r in requests for s in r.json()["series"]),
                         300 + 1800)


class FailureTest(HttpSinkTestCase):
    def test_retries_after_a_503_then_succeeds(self) -> None:
        failures = []
        sink = self.sink(backoff=lambda n: failures.append(n) or 0.0)
        self.server.answers.extend([(503, {"error": "busy"}), (503, {"error": "busy"})])
        logger = self.logger(sink, flush_interval_s=0.01)
        with captured_stderr() as err:
            logger.log(1, loss=1.0)
            requests = self.server.wait_for(3)
            wait_until(lambda: sink.kept_lines == 0 and sink.sent_lines == 1,
                       what="the line to be sent")
            self.assertEqual(len({r.body for r in requests}), 1, "the same batch each time")
            self.assertEqual(failures, [1, 2])
            self.assertIn("HTTP 503: busy", err.getvalue())
            self.assertEqual(err.getvalue().count("cannot send metrics"), 1)
            self.assertIn("metrics reach", err.getvalue())
            # The next failure (a 429 is one too) starts the backoff afresh.
            self.server.answers.append((429, {"error": "slow down"}))
            logger.log(2, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))
            wait_until(lambda: sink.sent_lines == 2, what="the second line to be sent")
        self.assertEqual(failures, [1, 2, 1])
        self.assertIn("HTTP 429: slow down", err.getvalue())

    def test_default_backoff_grows_to_30_s(self) -> None:
        self.assertTrue(0.25 <= default_backoff(1) <= 0.5)
        self.assertTrue(0.5 <= default_backoff(2) <= 1.0)
        for n in range(1, 200):
            self.assertLessEqual(default_backoff(n), 30.0)
        self.assertGreaterEqual(default_backoff(100), 15.0)

    def test_a_400_drops_the_batch_with_the_servers_message(self) -> None:
        sink = self.sink()
        logger = self.logger(sink)
        self.server.answers.append(
            (400, {"error": "metrics.series[0].values[0]: must be a number"}))
        with captured_stderr() as err:
            logger.log(1, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(err.getvalue(),
                         "trainyard: the server refused 1 metrics lines for run 17 (HTTP 400): "
                         "metrics.series[0].values[0]: must be a number; dropped them\n")
        self.assertEqual((sink.kept_lines, sink.refused_lines), (0, 1))
        logger.log(2, loss=2.0)
        self.assertTrue(logger.flush(timeout=10))
        self.assertEqual(steps_of(self.server.wait_for(2)[1:]), [2])

    def test_keeps_the_newest_lines_up_to_the_cap(self) -> None:
        sink = self.sink(max_buffered_lines=5, backoff=lambda n: 0.0)
        self.server.answers.extend([(503, {"error": "busy"})] * 2)
        lines = [records.encode_line(records.metrics_record(s, 1, {"loss": 1.0}))
                 for s in range(10)]
        with captured_stderr() as err:
            sink.write_lines(lines[:3])
            self.assertEqual(sink.kept_lines, 3)
            sink.write_lines(lines[3:8])
            self.assertEqual((sink.kept_lines, sink.dropped_lines), (5, 3))
            sink.write_lines(lines[8:])
        self.assertEqual(sink.dropped_lines, 5)
        self.assertEqual(sink.kept_lines, 0)
        self.assertEqual(steps_of(self.server.wait_for(3)[2:]), [5, 6, 7, 8, 9])
        self.assertEqual(err.getvalue().count("dropping the oldest of 5 kept lines"), 1)
        sink.close()

    def test_a_dead_server_does_not_block_log(self) -> None:
        # Accepts connections and never answers: a request hangs until its timeout (30 s
        # here, so it cannot end by itself during the test), or until the socket closes.
        hole = socket.socket()
        self.addCleanup(hole.close)
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)
        entered = threading.Event()

        class Recording(HttpSink):
            def write_lines(self, lines: Any) -> None:
                entered.set()
                super().write_lines(lines)

        sink = Recording(f"http://127.0.0.1:{hole.getsockname()[1]}", TOKEN, "17",
                         request_timeout_s=30)
        logger = MetricsLogger(sink, flush_interval_s=0.01, register_atexit=False)
        with captured_stderr() as err:
            logger.log(0, loss=0.0)
            self.assertTrue(entered.wait(10))
            # The flusher is now waiting for an answer that does not come.
            start = time.monotonic()
            for step in range(1, 5001):
                logger.log(step, loss=float(step))
            self.assertLess(time.monotonic() - start, 1.5, "log() waited for the server")
            start = time.monotonic()
            logger.close(timeout=0.2)
            self.assertLess(time.monotonic() - start, 1.5, "close() overran its timeout")
            # Closing the socket resets the connection: the request in flight fails now.
            hole.close()
            thread = logger._thread
            assert thread is not None
            thread.join(10)
            self.assertFalse(thread.is_alive())
        self.assertIn("gave up flushing metrics after 0.2 s; 5000 lines were not written",
                      err.getvalue())
        self.assertIn("cannot send metrics to", err.getvalue())

    def test_a_refused_connection_keeps_the_lines(self) -> None:
        sink = self.sink(server=f"http://127.0.0.1:{closed_port()}", backoff=lambda n: 3600)
        logger = self.logger(sink)
        with captured_stderr() as err:
            logger.log(1, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))
            logger.log(2, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))  # within the backoff: no new try
            self.assertEqual((sink.kept_lines, sink.requests), (2, 1))
            logger.close(timeout=0.05)
        self.assertIn("cannot send metrics to", err.getvalue())
        self.assertIn("ConnectionRefusedError", err.getvalue())
        self.assertIn("2 metrics lines were not sent", err.getvalue())


class ExitTest(HttpSinkTestCase):
    def test_exit_sends_what_is_buffered(self) -> None:
        code = ("import trainyard\n"
                "trainyard.log_params({'lr': 0.1})\n"
                "for s in range(50): trainyard.log(step=s, loss=float(s))\n")
        result = subprocess.run(
            [PYTHON, "-c", code], timeout=60, capture_output=True, text=True,
            env=child_env(TRAINYARD_SERVER=self.server.url, TRAINYARD_TOKEN=TOKEN,
                          TRAINYARD_RUN="17", RANK="2"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr, "")
        requests = list(self.server.requests)
        self.assertEqual(steps_of(requests), list(range(50)))
        self.assertEqual({r.json()["rank"] for r in requests}, {2})
        params = requests[0].json()["params"]
        self.assertEqual(params["lr"], 0.1)
        self.assertIn("env.packages_sha256", params)

    def test_the_exit_flush_is_bounded(self) -> None:
        self.server.default = (503, {"error": "down for maintenance"})
        sink = self.sink(backoff=lambda n: 0.02)
        logger = self.logger(sink)
        with captured_stderr() as err:
            logger.log(1, loss=1.0)
            start = time.monotonic()
            logger.close(timeout=0.3)
            elapsed = time.monotonic() - start
        self.assertGreaterEqual(elapsed, 0.2, "it should retry until (nearly) the deadline")
        self.assertLess(elapsed, 1.5)
        self.assertGreater(len(self.server.requests), 2)
        self.assertIn("1 metrics lines were not sent", err.getvalue())
        self.assertIn("HTTP 503: down for maintenance", err.getvalue())

    def test_the_sink_reports_at_its_deadline_by_itself(self) -> None:
        # The background thread may be the one in the sink when the deadline passes;
        # the report must not wait for a close() that may not get its turn.
        self.server.default = (503, {"error": "down"})
        sink = self.sink(backoff=lambda n: 0.01)
        sink.set_deadline(time.monotonic() + 0.1)
        with captured_stderr() as err:
            sink.write_lines([records.encode_line(records.metrics_record(s, 1, {"a": 1}))
                              for s in range(5)])
        self.assertIn("5 metrics lines were not sent", err.getvalue())
        self.assertEqual(sink.kept_lines, 0)

    def test_the_sinks_deadline_comes_before_the_loggers(self) -> None:
        deadlines = []

        class Sink(ListSink):
            def set_deadline(self, deadline: float) -> None:
                deadlines.append(deadline)

        logger = MetricsLogger(Sink(), register_atexit=False)
        logger.log(1, loss=1.0)
        start = time.monotonic()
        logger.close(timeout=2.0)
        # 10% of the time (at most 0.5 s) is left for the last lines and close().
        self.assertEqual(len(deadlines), 1)
        self.assertAlmostEqual(deadlines[0] - start, 1.8, delta=0.1)

    def test_close_retries_what_is_kept(self) -> None:
        self.server.answers.append((503, {"error": "busy"}))
        sink = self.sink(backoff=lambda n: 0.01)
        logger = self.logger(sink)
        with captured_stderr():
            logger.log(1, loss=1.0)
            self.assertTrue(logger.flush(timeout=10))
            self.assertEqual(sink.kept_lines, 1)
            logger.close(timeout=5)
        self.assertEqual(steps_of(self.server.requests[1:]), [1])
        self.assertEqual(sink.kept_lines, 0)


@unittest.skipUnless(shutil.which("openssl"), "needs the openssl command")
class HttpsTest(unittest.TestCase):
    def test_verifies_against_the_ca_file(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
            subprocess.run(
                ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
                 "-addext", "subjectAltName=IP:127.0.0.1", "-days", "1",
                 "-keyout", key, "-out", cert], check=True, capture_output=True, timeout=30)
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(cert, key)
            server = MetricsServer(tls)
            self.addCleanup(server.close)
            trusted = HttpSink(server.url, TOKEN, "17", ca_cert=cert)
            trusted.write_lines([records.encode_line(records.metrics_record(1, 1, {"a": 1}))])
            self.assertEqual(trusted.sent_lines, 1)
            trusted.close()
            untrusted = HttpSink(server.url, TOKEN, "17", backoff=lambda n: 3600)
            with captured_stderr() as err:
                untrusted.write_lines([records.encode_line(records.metrics_record(1, 1,
                                                                                  {"a": 1}))])
            self.assertEqual(untrusted.kept_lines, 1)
            self.assertIn("CERTIFICATE_VERIFY_FAILED", err.getvalue())
            self.assertEqual(len(server.requests), 1)


class SinkFromEnvTest(unittest.TestCase):
    HTTP = {"TRAINYARD_SERVER": "http://127.0.0.1:8470", "TRAINYARD_TOKEN": TOKEN,
            "TRAINYARD_RUN": "42"}

    def test_the_metrics_file_comes_first(self) -> None:
        sink = sink_from_env({**self.HTTP, "TRAINYARD_METRICS_FILE": "/tmp/m.jsonl"})
        self.assertIsInstance(sink, FileSink)

    def test_server_token_and_run_choose_http(self) -> None:
        sink = sink_from_env({**self.HTTP, "RANK": "3"})
        self.assertIsInstance(sink, HttpSink)
        assert isinstance(sink, HttpSink)
        self.assertEqual((sink.url, sink.rank),
                         ("http://127.0.0.1:8470/api/v1/runs/42/metrics", 3))
        self.assertEqual(sink_from_env(self.HTTP).rank, 0)  # type: ignore[attr-defined]

    def test_incomplete_or_bad_settings_send_nothing(self) -> None:
        with captured_stderr() as err:
            # SERVER and TOKEN alone are the CLI's: no run, no sink, nothing said.
            self.assertIsInstance(sink_from_env({"TRAINYARD_SERVER": "http://h",
                                                 "TRAINYARD_TOKEN": TOKEN}), NullSink)
            self.assertEqual(err.getvalue(), "")
            self.assertIsInstance(sink_from_env({"TRAINYARD_SERVER": "http://h",
                                                 "TRAINYARD_RUN": "4"}), NullSink)
            self.assertIn("TRAINYARD_RUN is set but TRAINYARD_TOKEN is not", err.getvalue())
            self.assertIsInstance(sink_from_env({**self.HTTP, "TRAINYARD_SERVER": "ftp://h"}),
                                  NullSink)
            self.assertIn("TRAINYARD_SERVER: expected http(s)://HOST[:PORT]", err.getvalue())
            self.assertIsInstance(sink_from_env({**self.HTTP, "RANK": "two"}), NullSink)
            self.assertIn("RANK: must be an integer >= 0, got 'two'", err.getvalue())
            self.assertIsInstance(sink_from_env({**self.HTTP,
                                                 "TRAINYARD_SERVER": "https://h",
                                                 "TRAINYARD_CA_CERT": "/nonexistent.pem"}),
                                  NullSink)
            self.assertIn("TRAINYARD_CA_CERT: cannot load", err.getvalue())


if __name__ == "__main__":
    unittest.main()
