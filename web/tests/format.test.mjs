// The dashboard's formatters (web/src/format.js), with node's test runner:
//   node --test web/tests/format.test.mjs
import { test } from "node:test";
import { strict as assert } from "node:assert";
import { duration, num, bytes, axisLabel, tick } from "../src/format.js";

test("durations read as at most two units", () => {
  assert.equal(duration(0), "0 ms");
  assert.equal(duration(999), "999 ms");
  assert.equal(duration(1000), "1s");
  assert.equal(duration(200 * 1000), "3m 20s");
  assert.equal(duration(3600 * 1000), "1h 0m");
  assert.equal(duration(26 * 3600 * 1000 + 5000), "1d 2h");
  assert.equal(duration(-5), "0 ms");
  assert.equal(duration(null), "–");
  assert.equal(duration(NaN), "–");
});

test("numbers keep a few significant digits and the API's non-finite words", () => {
  assert.equal(num(0), "0");
  assert.equal(num(1234), (1234).toLocaleString());
  assert.equal(num(0.123456), "0.1235");
  assert.equal(num(0.0001234), "1.23e-4");
  assert.equal(num(12345678.9), "1.23e+7");
  assert.equal(num("NaN"), "NaN");
  assert.equal(num(undefined), "–");
});

test("sizes are binary", () => {
  assert.equal(bytes(512), "512 B");
  assert.equal(bytes(1536), "1.5 KiB");
  assert.equal(bytes(85520809984), "79.6 GiB");
  assert.equal(bytes(null), "–");
});

test("every chart axis says its unit", () => {
  assert.equal(axisLabel("loss"), "loss");
  assert.equal(axisLabel("step_time_s"), "step time (s)");
  assert.equal(axisLabel("tokens_per_s"), "throughput (tokens/s)");
  assert.equal(axisLabel("checkpoint/bytes"), "checkpoint (bytes)");
  assert.equal(axisLabel("checkpoint/write_s"), "checkpoint/write (s)");
  assert.equal(axisLabel("images_per_s"), "images (per s)");
  assert.equal(axisLabel("gpu_util_pct"), "gpu util (%)");
  assert.equal(axisLabel("accuracy"), "accuracy (value)");
});

test("axis ticks are compact past ten thousand", () => {
  assert.equal(tick(3500000), "3.5M");
  assert.equal(tick(12000), "12K");
  assert.equal(tick(250), "250");
  assert.equal(tick(0.05), "0.05");
  assert.equal(tick(null), "");
});
