"""Validation and encoding of metrics-file records."""

from __future__ import annotations

import fractions
import json
import math
import unittest

from trainyard import records


class KeyTest(unittest.TestCase):
    def test_accepts_documented_characters(self) -> None:
        for key in ["loss", "eval/loss", "optim.lr", "a-b_c", "x" * 128, "0"]:
            self.assertEqual(records.check_key(key, "metric"), key)

    def test_rejects_bad_keys_naming_them(self) -> None:
        for key in ["", "x" * 129, "bad key", "loss!", "é", "a\nb", 3, None]:
            with self.assertRaises(ValueError) as ctx:
                records.check_key(key, "metric")
            self.assertIn(repr(key), str(ctx.exception))
            self.assertIn("A-Z a-z 0-9 _ . / -", str(ctx.exception))


class MetricsRecordTest(unittest.TestCase):
    def test_encodes_non_finite_as_strings_and_parses_back(self) -> None:
        record = records.metrics_record(7, 1000, {
            "nan": math.nan, "inf": math.inf, "ninf": -math.inf, "x": 0.25, "n": 3})
        line = records.encode_line(record)
        self.assertTrue(line.endswith(b"\n"))
        self.assertEqual(line.count(b"\n"), 1)
        raw = json.loads(line)  # strict JSON: no bare NaN tokens
        self.assertEqual(raw["metrics"], {"nan": "NaN", "inf": "Infinity",
                                          "ninf": "-Infinity", "x": 0.25, "n": 3})
        parsed = records.parse_line(line)
        self.assertTrue(math.isnan(parsed["metrics"]["nan"]))
        self.assertEqual(parsed["metrics"]["inf"], math.inf)
        self.assertEqual(parsed["metrics"]["ninf"], -math.inf)
        self.assertEqual(parsed["step"], 7)
        self.assertEqual(parsed["time_ms"], 1000)

    def test_accepts_real_numbers_that_are_not_int_or_float(self) -> None:
        class OneElementTensor:
            def __float__(self) -> float:
                return 1.5
        record = records.metrics_record(0, 0, {"a": fractions.Fraction(1, 4),
                                               "b": OneElementTensor()})
        self.assertEqual(record["metrics"], {"a": 0.25, "b": 1.5})

    def test_rejects_non_numbers_naming_key_and_value(self) -> None:
        for value in ["1.0", None, [1.0], True, b"x", {"a": 1}]:
            with self.assertRaises(ValueError) as ctx:
                records.metrics_record(1, 0, {"loss": value})
            self.assertIn("'loss'", str(ctx.exception))
            self.assertIn(repr(value)[:10], str(ctx.exception))

    def test_rejects_integers_beyond_64_bits(self) -> None:
        with self.assertRaisesRegex(ValueError, "'big'.*64-bit"):
            records.metrics_record(1, 0, {"big": 2**63})

    def test_rejects_bad_steps(self) -> None:
        for step in [-1, 1.5, "3", None, True]:
            with self.assertRaisesRegex(ValueError, "step"):
                records.metrics_record(step, 0, {"loss": 1.0})

    def test_rejects_empty_metrics(self) -> None:
        with self.assertRaisesRegex(ValueError, "no metrics"):
            records.metrics_record(1, 0, {})

    def test_rejects_lines_over_64_kib(self) -> None:
        many = {f"m{i:05d}": 1.0 for i in range(6000)}  # ~ 80 KiB
        with self.assertRaisesRegex(ValueError, "65536"):
            records.encode_line(records.metrics_record(1, 0, many))


class ParamsRecordTest(unittest.TestCase):
    def test_flattens_nested_dicts_and_keeps_scalars(self) -> None:
        record = records.params_record(5, {"lr": 0.1, "optim": {"name": "sgd", "m": 0.9},
                                           "amp": True, "note": None, "bad": math.inf})
        self.assertEqual(record["params"], {"lr": 0.1, "optim.name": "sgd", "optim.m": 0.9,
                                            "amp": True, "note": None, "bad": "Infinity"})

    def test_rejects_non_scalars(self) -> None:
        with self.assertRaisesRegex(ValueError, "'layers'.*list"):
            records.params_record(0, {"layers": [1, 2]})
        with self.assertRaisesRegex(ValueError, "'a.b c'"):
            records.params_record(0, {"a": {"b c": 1}})


class CheckpointRecordTest(unittest.TestCase):
    def test_omits_unknown_optional_fields(self) -> None:
        record = records.checkpoint_record(9, "/c/step-1.ckpt", 1)
        self.assertEqual(record, {"kind": "checkpoint", "time_ms": 9,
                                  "path": "/c/step-1.ckpt", "step": 1})

    def test_rejects_negative_sizes(self) -> None:
        with self.assertRaisesRegex(ValueError, "bytes.*-1"):
            records.checkpoint_record(9, "/c", 1, bytes_=-1)


class ParseLineTest(unittest.TestCase):
    def test_rejects_objects_without_kind(self) -> None:
        for line in ['{"step": 1}', "[1]", '{"kind": 3}']:
            with self.assertRaises(ValueError):
                records.parse_line(line)


if __name__ == "__main__":
    unittest.main()
