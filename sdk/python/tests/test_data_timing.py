"""TimedLoader: data_wait_s added to the script's own records, figures, epochs, errors.

Every wait comes from a fake clock that the fake loader advances, in binary fractions
(0.25, 0.125, ...), so the figures are exact and no test depends on the machine's speed.
"""

from __future__ import annotations

import gc
import unittest
from collections.abc import Iterator

import trainyard
from trainyard import records
from trainyard.data_timing import TimedLoader, timed
from trainyard.logger import MetricsLogger

from support import ListSink


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SlowLoader:
    """Like a DataLoader: has a len(), starts afresh at each iter() (taking `start_s`),
    and each batch takes its entry of `waits` on the fake clock; `end_s` is the time
    the next() that ends an epoch takes."""

    def __init__(self, clock: FakeClock, waits: list[float], start_s: float = 0.0,
                 end_s: float = 0.0) -> None:
        self.clock = clock
        self.waits = waits
        self.start_s = start_s
        self.end_s = end_s
        self.epochs = 0

    def __len__(self) -> int:
        return len(self.waits)

    def __iter__(self) -> Iterator[int]:
        self.clock.advance(self.start_s)
        self.epochs += 1
        return self._batches()

    def _batches(self) -> Iterator[int]:
        for i, wait in enumerate(self.waits):
            self.clock.advance(wait)
            yield i
        self.clock.advance(self.end_s)


class LoaderError(Exception):
    pass


class FailingIterator:
    """Yields 0, then takes 0.5 s and raises `error`, then yields 1."""

    def __init__(self, clock: FakeClock, error: BaseException) -> None:
        self.clock = clock
        self.error = error
        self.calls = 0

    def __iter__(self) -> "FailingIterator":
        return self

    def __next__(self) -> int:
        self.calls += 1
        if self.calls == 1:
            return 0
        if self.calls == 2:
            self.clock.advance(0.5)
            raise self.error
        if self.calls == 3:
            return 1
        raise StopIteration


class DataTimingTest(unittest.TestCase):
    def setUp(self) -> None:
        self.clock = FakeClock()
        self.sink = ListSink()
        self.logger = MetricsLogger(self.sink, clock_ms=lambda: 7, register_atexit=False)
        self.addCleanup(self.logger.close)

    def records(self) -> list[dict]:
        self.assertTrue(self.logger.flush(timeout=20))
        return [records.parse_line(line) for line in self.sink.lines]

    def waits(self, key: str = "data_wait_s") -> dict[int, float]:
        """{step: value} of `key` in the metrics records; fails on a step logged twice."""
        out: dict[int, float] = {}
        for r in self.records():
            if r["kind"] == "metrics" and key in r["metrics"]:
                self.assertNotIn(r["step"], out, f"{key} logged twice at step {r['step']}")
                out[r["step"]] = r["metrics"][key]
        return out

    def timed(self, iterable: object, **kwargs: object) -> TimedLoader:
        return timed(iterable, logger=self.logger, clock=self.clock, **kwargs)  # type: ignore[arg-type]

    # ---- what is logged ----

    def test_each_step_record_gets_the_wait_for_its_batch(self) -> None:
        loader = SlowLoader(self.clock, [0.25, 0.125, 0.5], start_s=1.0)
        for step, batch in enumerate(self.timed(loader), start=1):
            self.clock.advance(2.0)  # the step's compute
            self.logger.log(step, loss=float(batch), step_time_s=2.0)
        # The first batch's wait includes iter(), where a DataLoader starts its workers.
        self.assertEqual(self.waits(), {1: 1.25, 2: 0.125, 3: 0.5})
        metrics = [r["metrics"] for r in self.records()]
        self.assertEqual(metrics[0], {"loss": 0.0, "step_time_s": 2.0, "data_wait_s": 1.25})

    def test_the_wrapper_logs_no_record_of_its_own(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.25]))
        self.assertEqual(list(data), [0, 1])
        self.assertEqual(self.records(), [])
        self.logger.log(3, loss=1.0)
        self.assertEqual(self.waits(), {3: 0.5}, "the records' steps are the script's")

    def test_records_before_the_first_batch_get_nothing(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25]))
        self.logger.log(0, num_params=10)
        for _ in data:
            self.logger.log(1, loss=1.0)
        self.logger.log(1, eval_loss=2.0)  # after the step's record: nothing left
        self.assertEqual(self.waits(), {1: 0.25})

    def test_resumed_run_keeps_the_scripts_step_numbers(self) -> None:
        start = 1200  # the checkpoint's step
        self.logger.log(start, num_params=10)
        data = self.timed(SlowLoader(self.clock, [0.25, 0.5]))
        for step, _ in enumerate(data, start=start + 1):
            self.logger.log(step, loss=1.0)
        self.assertEqual(self.waits(), {1201: 0.25, 1202: 0.5})

    def test_a_resumed_run_that_logs_nothing_first_counts_one_step(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.5]))
        for step, _ in enumerate(data, start=1201):
            self.logger.log(step, loss=1.0)
        self.assertEqual(self.waits(), {1201: 0.25, 1202: 0.5})

    def test_gradient_accumulation_adds_up_the_micro_batches_of_a_step(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.125, 0.5, 0.125]))
        for i, _ in enumerate(data):
            if i % 2 == 1:  # two micro-batches per optimizer step
                self.logger.log(i // 2 + 1, loss=1.0)
        self.assertEqual(self.waits(), {1: 0.375, 2: 0.625})

    def test_logging_every_n_steps_gives_the_mean_wait_per_step(self) -> None:
        self.logger.log(0, num_params=10)
        data = self.timed(SlowLoader(self.clock, [0.25] * 4 + [0.5] * 4))
        for step, _ in enumerate(data, start=1):
            if step % 4 == 0:
                self.logger.log(step, loss=1.0)
        self.assertEqual(self.waits(), {4: 0.25, 8: 0.5})

    def test_a_key_the_script_logged_itself_is_kept(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.5]))
        for step, _ in enumerate(data, start=1):
            if step == 1:
                self.logger.log(step, loss=1.0, data_wait_s=9.0)
                self.logger.log(step, lr=0.1)  # the dropped wait does not come back
            else:
                self.logger.log(step, loss=1.0)
        self.assertEqual(self.waits(), {1: 9.0, 2: 0.5})

    def test_two_loaders_with_one_key_never_log_it_twice(self) -> None:
        first = self.timed(SlowLoader(self.clock, [0.25]))
        second = self.timed(SlowLoader(self.clock, [0.5]))
        list(first), list(second)
        self.logger.log(1, loss=1.0)
        self.logger.log(1, lr=0.1)
        self.assertEqual(len(self.waits()), 1)

    def test_an_evaluation_loader_with_its_own_key(self) -> None:
        train = self.timed(SlowLoader(self.clock, [0.25, 0.25]))
        evaluation = self.timed(SlowLoader(self.clock, [0.125, 0.125]), key="eval/data_wait_s")
        for step, _ in enumerate(train, start=1):
            self.logger.log(step, loss=1.0)
        for _ in evaluation:
            pass
        self.logger.log(2, eval_loss=0.5)
        self.assertEqual(self.waits(), {1: 0.25, 2: 0.25})
        self.assertEqual(self.waits("eval/data_wait_s"), {2: 0.25})

    def test_a_loader_no_longer_used_is_let_go(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25]))
        list(data)
        del data
        gc.collect()
        self.logger.log(1, loss=1.0)
        self.assertEqual(self.waits(), {})

    def test_the_default_logger_is_used_when_none_is_given(self) -> None:
        sink = ListSink()
        trainyard.configure(sink=sink, log_environment=False)
        try:
            for step, _ in enumerate(timed(SlowLoader(self.clock, [0.25]), clock=self.clock),
                                     start=1):
                trainyard.log(step=step, loss=1.0)
            self.assertTrue(trainyard.flush(timeout=20))
            [record] = [records.parse_line(line) for line in sink.lines]
            self.assertEqual(record["metrics"], {"loss": 1.0, "data_wait_s": 0.25})
        finally:
            trainyard.configure(sink=ListSink())

    # ---- figures, epochs, len ----

    def test_figures(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.5, 0.25]))
        self.assertEqual((data.batches, data.last_wait_s, data.total_wait_s,
                          data.wait_fraction), (0, 0.0, 0.0, 0.0))
        for _ in data:
            self.clock.advance(0.25)  # compute
        self.assertEqual(data.batches, 3)
        self.assertEqual(data.last_wait_s, 0.25)
        self.assertEqual(data.total_wait_s, 1.0)
        self.assertEqual(data.wait_fraction, 1.0 / 1.75)
        self.clock.advance(0.25)  # time outside the loop counts as not waiting
        self.assertEqual(data.wait_fraction, 0.5)

    def test_every_epoch_iterates_the_loader_again(self) -> None:
        loader = SlowLoader(self.clock, [0.25, 0.25], start_s=0.5, end_s=0.125)
        data = self.timed(loader)
        self.assertEqual(len(data), 2)
        self.assertTrue(data)
        step = 0
        for epoch in range(3):
            for batch in data:
                step += 1
                self.logger.log(step, loss=float(batch))
        self.assertEqual(loader.epochs, 3)
        self.assertEqual(data.batches, 6)
        # Each epoch's first batch waits for iter() and for the end of the epoch before.
        self.assertEqual(self.waits(), {1: 0.75, 2: 0.25, 3: 0.875, 4: 0.25, 5: 0.875,
                                        6: 0.25})
        self.assertEqual(data.total_wait_s, 3 * (0.5 + 0.25 + 0.25 + 0.125))

    def test_a_generator_is_iterated_once_and_has_no_len(self) -> None:
        def numbers() -> Iterator[int]:
            yield from range(3)

        data = self.timed(numbers())
        with self.assertRaisesRegex(TypeError, "generator"):
            len(data)
        self.assertTrue(data)
        self.assertEqual(list(data), [0, 1, 2])
        self.assertEqual(list(data), [], "a generator is exhausted after one pass")
        self.assertEqual(data.batches, 3)

    def test_len_and_truth_are_the_iterables(self) -> None:
        self.assertEqual(len(self.timed([1, 2, 3])), 3)
        self.assertFalse(self.timed([]))
        self.assertEqual(list(self.timed([])), [])

    def test_an_iterator_can_be_driven_with_next(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25, 0.5]))
        it = iter(data)
        self.assertIs(iter(it), it)
        self.assertEqual((next(it), next(it)), (0, 1))
        with self.assertRaises(StopIteration):
            next(it)
        self.assertEqual(data.total_wait_s, 0.75)

    # ---- errors ----

    def test_an_exception_from_the_loader_propagates_unchanged(self) -> None:
        error = LoaderError("corrupt shard 17")
        data = self.timed(FailingIterator(self.clock, error))
        it = iter(data)
        self.assertEqual(next(it), 0)
        with self.assertRaises(LoaderError) as caught:
            next(it)
        self.assertIs(caught.exception, error)
        self.assertIsNone(error.__cause__)
        self.assertIsNone(error.__context__)
        # The loader may go on; the failed call's time counts towards the next batch.
        self.assertEqual(next(it), 1)
        self.assertEqual(data.last_wait_s, 0.5)
        self.assertEqual(data.batches, 2)

    def test_an_exception_from_iter_propagates_unchanged(self) -> None:
        error = LoaderError("no such dataset")

        class Broken:
            def __iter__(self) -> Iterator[int]:
                raise error

        with self.assertRaises(LoaderError) as caught:
            iter(self.timed(Broken()))
        self.assertIs(caught.exception, error)

    def test_bad_arguments_name_the_argument_and_value(self) -> None:
        with self.assertRaisesRegex(TypeError, r"iterable: must be iterable .*got int 5"):
            self.timed(5)
        with self.assertRaisesRegex(ValueError, r"key: must be .*got 'data wait'"):
            self.timed([], key="data wait")
        with self.assertRaisesRegex(ValueError, r"key: must be .*got ''"):
            self.timed([], key="")
        with self.assertRaisesRegex(ValueError, r"key: must be .*got None"):
            self.timed([], key=None)
        with self.assertRaisesRegex(TypeError, r"clock: must be a callable .*got float 1.5"):
            timed([], logger=self.logger, clock=1.5)  # type: ignore[arg-type]
        with self.assertRaisesRegex(TypeError, r"logger: must be a trainyard.MetricsLogger "
                                               r"or None, got str 'stdout'"):
            timed([], logger="stdout")  # type: ignore[arg-type]

    def test_a_bad_step_in_the_scripts_record_keeps_the_wait(self) -> None:
        data = self.timed(SlowLoader(self.clock, [0.25]))
        list(data)
        with self.assertRaisesRegex(ValueError, "step"):
            self.logger.log(-1, loss=1.0)
        self.logger.log(1, loss=1.0)
        self.assertEqual(self.waits(), {1: 0.25})


class MetricSourceTest(unittest.TestCase):
    """The logger side: sources added once, held weakly, asked with the steps."""

    class Source:
        def __init__(self) -> None:
            self.asked: list[tuple[int, int | None]] = []

        def take_metrics(self, step: int, previous_step: int | None) -> dict[str, float]:
            self.asked.append((step, previous_step))
            return {"extra": 1.5}

    def test_sources_are_asked_with_the_previous_step(self) -> None:
        sink = ListSink()
        logger = MetricsLogger(sink, register_atexit=False)
        self.addCleanup(logger.close)
        source = self.Source()
        logger.add_metric_source(source)
        logger.add_metric_source(source)  # once only
        logger.log(5, loss=1.0)
        logger.log(9, loss=1.0)
        logger.remove_metric_source(source)
        logger.log(10, loss=1.0)
        self.assertEqual(source.asked, [(5, None), (9, 5)])
        self.assertTrue(logger.flush(timeout=20))
        got = [records.parse_line(line)["metrics"] for line in sink.lines]
        self.assertEqual(got, [{"loss": 1.0, "extra": 1.5}] * 2 + [{"loss": 1.0}])


if __name__ == "__main__":
    unittest.main()
