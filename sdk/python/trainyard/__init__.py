"""Trainyard SDK: what a training job uses to talk to the cluster.

    import trainyard

    trainyard.log_params({"lr": 3e-4, "batch_size": 32})
    ckpt = trainyard.Checkpointer(trainyard.checkpoint_dir())
    start = 0
    if (loaded := ckpt.load_latest()) is not None:
        start, state = loaded
    for step in range(start + 1, steps + 1):
        loss = train_step()
        trainyard.log(step=step, loss=loss, lr=lr)       # never blocks on I/O
        if trainyard.preemption_requested():
            ckpt.save(step, state)
            ckpt.wait()
            sys.exit(trainyard.EXIT_PREEMPTED)

The module-level functions act on one default logger and one preemption watcher per
process, created from the environment the agent sets (see docs/metrics-file.md and
docs/agent-protocol.md). That default exists because `trainyard.log(...)` must be
callable from anywhere in a training script without plumbing; everything is also
available as plain classes (MetricsLogger, PreemptionWatcher, Checkpointer) for code
and tests that prefer to pass them in. Standard library only; Python 3.11+.

When Trainyard asks for a profile (`trainyard profile JOB`), the default logger records
the next steps by itself, with torch.profiler if the job imported torch, else with its
own step spans; see profiler.py and profile_requested().

timed(loader) wraps a DataLoader (or any iterable) so that each step's wait for its
batch is added as data_wait_s to the script's own log(step=...) record; see
data_timing.py.

faults() says what injected faults (docs/faults.md) ask of this rank's training loop,
and checkpoint_requested() whether Trainyard asked for a checkpoint now; see faults.py.

Importing this module installs the SIGUSR1 handler (when imported in the main thread),
so that a notice arriving before the first preemption_requested() call is not fatal.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from typing import Union

from . import environment as _environment
from .checkpoint import Checkpointer, CheckpointError, read_checkpoint
from .data_timing import TimedLoader, timed
from .environment import environment_params
from .faults import CheckpointRequestWatcher, FaultWatcher
from .logger import FileSink, MetricSource, MetricsLogger, MetricsSink, NullSink, sink_from_env
from .preemption import EXIT_PREEMPTED, PreemptionWatcher, notice_signal_from_env
from .profiler import Profiler, profiler_from_env
from .records import parse_line

__all__ = [
    "EXIT_PREEMPTED", "Checkpointer", "CheckpointError", "FileSink", "HttpSink",
    "MetricSource", "MetricsLogger", "MetricsSink", "NullSink", "PreemptionWatcher",
    "checkpoint_dir", "CheckpointRequestWatcher", "checkpoint_requested", "checkpoint_saved", "configure",
    "default_logger", "environment_params", "faults", "FaultWatcher", "flush",
    "install_preemption_handler", "local_rank", "local_world_size", "log",
    "log_environment", "log_metrics", "log_params", "parse_line", "preemption_notice",
    "preemption_requested", "Profiler", "profile_requested", "rank", "read_checkpoint",
    "resume_from", "timed", "TimedLoader", "world_size",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # HttpSink on first use: http.client and ssl would add ~40 ms to every import.
    if name == "HttpSink":
        from .http_sink import HttpSink
        return HttpSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- the job's place in the gang ----


def _int_env(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}: must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def rank() -> int:
    """Global rank of this process (RANK), 0 when run outside Trainyard."""
    return _int_env("RANK", 0, 0)


def world_size() -> int:
    """Number of ranks in the job (WORLD_SIZE), 1 when run outside Trainyard."""
    return _int_env("WORLD_SIZE", 1, 1)


def local_rank() -> int:
    """Rank of this process on its node (LOCAL_RANK), 0 when run outside Trainyard."""
    return _int_env("LOCAL_RANK", 0, 0)


def local_world_size() -> int:
    """Ranks on this node (LOCAL_WORLD_SIZE), 1 when run outside Trainyard."""
    return _int_env("LOCAL_WORLD_SIZE", 1, 1)


def checkpoint_dir() -> str | None:
    """Directory for this job's checkpoints (TRAINYARD_CHECKPOINT_DIR), or None if unset."""
    return os.environ.get("TRAINYARD_CHECKPOINT_DIR") or None


def resume_from() -> str | None:
    """Latest complete checkpoint to resume from (TRAINYARD_RESUME_FROM), None on a
    fresh start."""
    return os.environ.get("TRAINYARD_RESUME_FROM") or None


# ---- metrics ----

_default_lock = threading.Lock()
_default: MetricsLogger | None = None


def default_logger() -> MetricsLogger:
    """The process's logger, created on first use from the environment:
    TRAINYARD_METRICS_FILE, else TRAINYARD_SERVER + TRAINYARD_TOKEN + TRAINYARD_RUN (the
    server's batch endpoint), else nowhere (records are validated, then discarded).
    It logs the env.* params with its first record unless TRAINYARD_LOG_ENVIRONMENT=0,
    and records the profiles asked for through TRAINYARD_PROFILE_FILE (profiler.py)."""
    global _default
    with _default_lock:
        if _default is None:
            sink = sink_from_env(os.environ)
            _default = MetricsLogger(sink, log_environment=_log_environment_for(sink),
                                     profiler=profiler_from_env(os.environ))
        return _default


def _log_environment_for(sink: MetricsSink) -> bool:
    """Whether the default logger logs the env.* params by itself: unless
    TRAINYARD_LOG_ENVIRONMENT=0, or there is nowhere for them to go."""
    return _environment.enabled_by_env(os.environ) and not isinstance(sink, NullSink)


def configure(metrics_file: str | None = None, *, sink: MetricsSink | None = None,
              **logger_options: object) -> MetricsLogger:
    """Replaces the default logger (the old one is flushed and closed) and returns it.

    Give `metrics_file` (a path), or `sink`, or neither to re-read the environment.
    `logger_options` go to MetricsLogger (flush_interval_s, flush_points,
    log_environment, profiler, ...); log_environment defaults to
    TRAINYARD_LOG_ENVIRONMENT != 0, profiler to one for TRAINYARD_PROFILE_FILE.
    """
    global _default
    if metrics_file is not None and sink is not None:
        raise ValueError("configure: give metrics_file or sink, not both")
    if sink is None:
        sink = FileSink(metrics_file) if metrics_file else sink_from_env(os.environ)
    logger_options.setdefault("log_environment", _log_environment_for(sink))
    if "profiler" not in logger_options:
        logger_options["profiler"] = profiler_from_env(os.environ)
    new = MetricsLogger(sink, **logger_options)  # type: ignore[arg-type]
    with _default_lock:
        old, _default = _default, new
    if old is not None:
        old.close()
    return new


def log(step: int, **metrics: object) -> None:
    """Records metric values at `step`, e.g. log(step=100, loss=2.31, lr=3e-4).

    Returns at once; a background thread writes. NaN and infinities are allowed.
    Raises ValueError naming the key and value if a key is not [A-Za-z0-9_./-]{1,128}
    or a value is not a number.
    """
    default_logger().log_metrics(step, metrics)


def log_metrics(step: int, metrics: Mapping[str, object]) -> None:
    """Like log(), with a mapping: for keys that are not Python identifiers ("eval/loss")."""
    default_logger().log_metrics(step, metrics)


def log_params(params: Mapping[str, object]) -> None:
    """Records hyperparameters: str, int, float, bool or None values; nested dicts are
    flattened to dotted keys."""
    default_logger().log_params(params)


def checkpoint_saved(path: str, step: int, started_ms: int | None = None,
                     duration_ms: int | None = None, bytes: int | None = None) -> None:
    """Reports a complete checkpoint (Checkpointer does this itself; for jobs that save
    their own way)."""
    default_logger().checkpoint_saved(path, step, started_ms, duration_ms, bytes)


def log_environment() -> None:
    """Logs the env.* params (interpreter, platform, installed packages, torch and CUDA
    if torch is imported) that the run's environment identity is computed from.

    The default logger does this by itself with its first record (unless
    TRAINYARD_LOG_ENVIRONMENT=0); calling it again does nothing. Returns at once: the
    params are collected on the logger's background thread, and a failure to collect
    them is only reported on stderr.
    """
    default_logger().log_environment()


def flush(timeout: float | None = None) -> bool:
    """Writes everything logged so far; False if `timeout` seconds passed first."""
    return default_logger().flush(timeout)


# ---- profiling ----


def profile_requested() -> bool:
    """True while Trainyard has asked this rank for a profile that is not yet recorded
    (`trainyard profile JOB`). Nothing needs doing: recording starts by itself at the
    next log(step=...) and covers the steps asked for; a loop may use this to, say, run
    its usual steps rather than an evaluation while it records."""
    profiler = default_logger().profiler
    return profiler is not None and profiler.requested()


# ---- injected faults and checkpoint requests ----

_fault_watcher = FaultWatcher()
_checkpoint_requests = CheckpointRequestWatcher()


def faults() -> dict[str, object]:
    """What the faults injected on this rank's node ask of its training loop
    (TRAINYARD_FAULT_FILE): {"slow_factor": 1.0, "hang": False, "data_stall_s": 0.0,
    "loss_nan": False, "grad_spike": False} when there are none. Cheap enough to call
    every step (a stat() unless the file changed)."""
    return _fault_watcher.effects()


def checkpoint_requested() -> bool:
    """True once for each checkpoint Trainyard asks of this rank
    (TRAINYARD_CHECKPOINT_REQUEST_FILE): save one at the current step."""
    return _checkpoint_requests.requested()


# ---- preemption ----

_watcher = PreemptionWatcher()


def install_preemption_handler(signum: Union[int, str] = signal.SIGUSR1) -> None:
    """Treats `signum` (number or name) as the preemption notice. Main thread only."""
    _watcher.install(signum)


def preemption_requested() -> bool:
    """True once the notice signal arrived or TRAINYARD_PREEMPT_FILE exists: save a
    checkpoint, wait for it, and exit with EXIT_PREEMPTED."""
    return _watcher.requested()


def preemption_notice() -> dict[str, object] | None:
    """The agent's notice ({"deadline_ms", "signal", "grace_ms"}) if the file exists."""
    return _watcher.notice()


def _install_default_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # Python allows handlers only in the main thread; see module docstring.
    _watcher.install(signal.SIGUSR1)
    try:
        extra = notice_signal_from_env(os.environ)
    except ValueError as e:
        print(f"trainyard: {e}; using SIGUSR1 only", file=sys.stderr, flush=True)
        return
    if extra != signal.SIGUSR1:
        _watcher.install(extra)


_install_default_handlers()
