"""How long the training loop waits for its data, measured from outside the script.

    for step, batch in enumerate(trainyard.timed(loader), start=start + 1):
        loss = train_step(batch)
        trainyard.log(step=step, loss=loss, step_time_s=dt)   # gets data_wait_s too

A TimedLoader wraps any iterable (a torch DataLoader, a list, a generator) without
importing torch. It times every call into the loader with a monotonic clock: iter() at
the start of each epoch (where a DataLoader starts its workers) and each next(). The
wait before a batch is the time inside next() that returned it, plus any time spent in
the loader since the previous batch that produced none (iter(), the next() that ended
the previous epoch, one that raised).

Step numbering is the script's: the wrapper does not log records of its own. It adds
`data_wait_s` to the next metrics record the script logs through the same logger
(trainyard.log(step=...) for the default logger), so the value lands at the script's
step, resumed runs included, and a job that logs once per step gets one value per step
in the record that also carries step_time_s. What it adds is the wait since the record
that last took it, per step: the batches' waits added up, divided by the steps since the
metrics record logged before this one (1 if there was none or its step was not lower).
So with gradient accumulation a step's value is the wait for all its micro-batches, and
a job that logs every N steps gets the mean wait per step over the N: in both cases
comparable with step_time_s, as Trainyard's data-loading check (data wait / step time)
and the job.data_wait_s alert need. A record that already has the key (the script
logged data_wait_s itself, or another TimedLoader with the same key came first) keeps
its value and the wait is dropped, so a step never gets two. A record logged when no
batch came since the last one that took a wait gets nothing.

Why not count steps in the wrapper and log its own records: a batch is not a step under
gradient accumulation, an evaluation loop or a second loader, and a record of its own per
batch would double the records and show the profiler two log calls per step.

Threading: iterate in one thread at a time; the logging may happen in another (the
pending wait is handed over under a lock). The figures (last_wait_s, total_wait_s,
batches, wait_fraction) are plain reads, meant for the iterating thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from . import records
from .logger import MetricsLogger

T = TypeVar("T")

DATA_WAIT_KEY = "data_wait_s"


class TimedLoader(Generic[T]):
    """An iterable that yields what `iterable` yields and times the waits for it.

    `logger`: the MetricsLogger whose records get `key` added (default: the process's
    default logger, looked up at each iter(), so trainyard.configure() is followed).
    `key`: the metric to add, "data_wait_s" by default (what Trainyard's diagnose and
    alerts read); give a second loader (evaluation) a key of its own, such as
    "eval/data_wait_s". `clock`: monotonic seconds (tests pass a fake).

    len() and truth value are those of `iterable` (len() raises TypeError if it has
    none). Iterating again iterates `iterable` again (one epoch each; a generator is
    exhausted after the first, as without the wrapper). Exceptions from the loader,
    StopIteration included, reach the loop unchanged.
    """

    def __init__(self, iterable: Iterable[T], *, logger: MetricsLogger | None = None,
                 key: str = DATA_WAIT_KEY,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if not isinstance(iterable, Iterable) and not hasattr(type(iterable), "__getitem__"):
            raise TypeError(f"iterable: must be iterable (a DataLoader, a list, a "
                            f"generator, ...), got {type(iterable).__name__} {iterable!r:.80}")
        if logger is not None and not callable(getattr(logger, "add_metric_source", None)):
            raise TypeError(f"logger: must be a trainyard.MetricsLogger or None, got "
                            f"{type(logger).__name__} {logger!r:.80}")
        if not isinstance(key, str) or records.KEY_PATTERN.fullmatch(key) is None:
            raise ValueError(f"key: must be {records.KEY_RULE}, got {key!r}")
        if not callable(clock):
            raise TypeError(f"clock: must be a callable returning seconds, got "
                            f"{type(clock).__name__} {clock!r:.80}")
        self._iterable = iterable
        self._logger = logger
        self._key = key
        self._clock = clock
        self._attached_to: MetricsLogger | None = None
        # Figures, written by the iterating thread only.
        self._last_wait_s = 0.0
        self._total_wait_s = 0.0
        self._batches = 0
        self._started_at: float | None = None
        self._carry_s = 0.0  # time in the loader since the last batch that gave none
        # The wait not yet taken by a record. REQUIRES: _pending_lock held.
        self._pending_lock = threading.Lock()
        self._pending_wait_s = 0.0
        self._pending_batches = 0

    # ---- iteration ----

    def __iter__(self) -> Iterator[T]:
        self._attach()
        clock = self._clock
        start = clock()
        if self._started_at is None:
            self._started_at = start
        try:
            iterator = iter(self._iterable)
        finally:
            self._waited_for_nothing(clock() - start)
        return _TimedIterator(self, iterator)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]

    def __bool__(self) -> bool:
        return bool(self._iterable)

    def _attach(self) -> None:
        logger = self._logger
        if logger is None:
            from . import default_logger  # the package imports this module
            logger = default_logger()
        if logger is self._attached_to:
            return
        if self._attached_to is not None:
            self._attached_to.remove_metric_source(self)
        logger.add_metric_source(self)
        self._attached_to = logger

    def _waited_for_batch(self, wait_s: float) -> None:
        wait_s += self._carry_s
        self._carry_s = 0.0
        self._last_wait_s = wait_s
        self._total_wait_s += wait_s
        self._batches += 1
        with self._pending_lock:
            self._pending_wait_s += wait_s
            self._pending_batches += 1

    def _waited_for_nothing(self, wait_s: float) -> None:
        """Time in the loader that produced no batch: counted in the next batch's wait."""
        self._carry_s += wait_s

    # ---- what the logger asks (logger.MetricSource) ----

    def take_metrics(self, step: int, previous_step: int | None
                     ) -> Mapping[str, float] | None:
        """{key: wait per step} since the record that last took it; None when no batch
        came since. See the module docstring."""
        with self._pending_lock:
            if self._pending_batches == 0:
                return None
            wait_s = self._pending_wait_s
            self._pending_wait_s = 0.0
            self._pending_batches = 0
        steps = step - previous_step if previous_step is not None and step > previous_step else 1
        return {self._key: wait_s / steps}

    # ---- figures ----

    @property
    def iterable(self) -> Iterable[T]:
        """The wrapped iterable (e.g. for loader.sampler.set_epoch(epoch))."""
        return self._iterable

    @property
    def key(self) -> str:
        """The metric this wrapper adds to the logged records."""
        return self._key

    @property
    def last_wait_s(self) -> float:
        """Seconds waited for the latest batch; 0.0 before the first."""
        return self._last_wait_s

    @property
    def total_wait_s(self) -> float:
        """Seconds spent in the loader since the first iter(), every epoch included."""
        return self._total_wait_s + self._carry_s

    @property
    def batches(self) -> int:
        """Batches the loader has yielded, every epoch included."""
        return self._batches

    @property
    def wait_fraction(self) -> float:
        """total_wait_s over the time since the first iter() (0.0 before it): the share
        of the loop's time spent waiting for data."""
        if self._started_at is None:
            return 0.0
        elapsed = self._clock() - self._started_at
        return self.total_wait_s / elapsed if elapsed > 0 else 0.0

    def __repr__(self) -> str:
        return (f"TimedLoader({self._iterable!r:.80}, key={self._key!r}, "
                f"batches={self._batches}, total_wait_s={self.total_wait_s:.6g})")


class _TimedIterator(Generic[T]):
    """One epoch of a TimedLoader."""

    __slots__ = ("_owner", "_next", "_clock")

    def __init__(self, owner: TimedLoader[T], iterator: Iterator[T]) -> None:
        self._owner = owner
        self._next = iterator.__next__
        self._clock = owner._clock

    def __iter__(self) -> _TimedIterator[T]:
        return self

    def __next__(self) -> T:
        clock = self._clock
        start = clock()
        try:
            batch = self._next()
        except BaseException:
            self._owner._waited_for_nothing(clock() - start)
            raise
        self._owner._waited_for_batch(clock() - start)
        return batch


def timed(iterable: Iterable[T], *, logger: MetricsLogger | None = None,
          key: str = DATA_WAIT_KEY,
          clock: Callable[[], float] = time.perf_counter) -> TimedLoader[T]:
    """Wraps `iterable` (a DataLoader, any iterable) so that the script's next logged
    record at each step gets `data_wait_s`: `for batch in trainyard.timed(loader):`.
    Arguments as for TimedLoader."""
    return TimedLoader(iterable, logger=logger, key=key, clock=clock)
