"""Validation and encoding of the records a job writes to its metrics file.

One record is one JSON object on one line (the format is specified in
docs/metrics-file.md). Everything here is pure: no I/O, no clock, no global state, so a
record is checked and encoded in the caller's thread and errors surface at the call
that caused them, not later in a background thread.
"""

from __future__ import annotations

import json
import math
import numbers
import re
from collections.abc import Mapping
from typing import Any, Union

# Limits shared with the agent and server (docs/metrics-file.md).
MAX_LINE_BYTES = 64 * 1024
MAX_KEY_CHARS = 128
KEY_PATTERN = re.compile(r"[A-Za-z0-9_./-]{1,128}")
KEY_RULE = "1-128 characters of A-Z a-z 0-9 _ . / -"

# JSON has no NaN or infinities; they travel as these strings.
NAN = "NaN"
POS_INF = "Infinity"
NEG_INF = "-Infinity"
_NON_FINITE = {NAN: math.nan, POS_INF: math.inf, NEG_INF: -math.inf}

# Integers must fit the server's 64-bit integers; larger ones are rejected, not rounded.
_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1

Number = Union[int, float]
EncodedNumber = Union[int, float, str]
Scalar = Union[str, int, float, bool, None]


def check_key(key: object, what: str) -> str:
    """Returns `key` if it is a valid metric or param name; raises ValueError otherwise.

    `what` names the caller's argument in the message, e.g. "metric" or "param".
    """
    if not isinstance(key, str) or KEY_PATTERN.fullmatch(key) is None:
        raise ValueError(f"{what} key {key!r} is invalid: keys must be {KEY_RULE}")
    return key


def encode_float(value: float) -> EncodedNumber:
    """Returns a finite float unchanged and NaN/Inf as their string spellings."""
    if math.isnan(value):
        return NAN
    if math.isinf(value):
        return POS_INF if value > 0 else NEG_INF
    return value


def encode_number(key: str, value: object, what: str = "metric") -> EncodedNumber:
    """Returns `value` as a JSON-ready number; raises ValueError naming key and value.

    Accepts int, float and other real numbers (numpy scalars, Fraction, objects with
    `__float__` such as a one-element torch tensor). bool is rejected: it is almost
    always a mistake in a metric, and True/1 would be indistinguishable on the server.
    """
    if isinstance(value, bool):
        raise ValueError(
            f"{what} {key!r}: got bool {value!r}; metric values must be int or float "
            "(log 1/0, or record flags with log_params)")
    if isinstance(value, numbers.Integral):
        as_int = int(value)
        if not _INT_MIN <= as_int <= _INT_MAX:
            raise ValueError(
                f"{what} {key!r}: integer {as_int} is outside the 64-bit range "
                f"[{_INT_MIN}, {_INT_MAX}]; pass it as a float if precision may be lost")
        return as_int
    if isinstance(value, float):
        return encode_float(value)
    if isinstance(value, (str, bytes, bytearray)) or not hasattr(value, "__float__"):
        raise ValueError(
            f"{what} {key!r}: got {type(value).__name__} {value!r:.80}; "
            "metric values must be int or float")
    try:
        as_float = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{what} {key!r}: {type(value).__name__} {value!r:.80} cannot be converted to "
            f"a float ({e}); metric values must be int or float") from None
    return encode_float(as_float)


def check_step(step: object) -> int:
    """Returns `step` if it is an int >= 0; raises ValueError otherwise."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or int(step) < 0:
        raise ValueError(f"step: must be an int >= 0, got {step!r}")
    if int(step) > _INT_MAX:
        raise ValueError(f"step: must be at most {_INT_MAX}, got {step!r}")
    return int(step)


def encode_line(record: Mapping[str, Any]) -> bytes:
    """Returns `record` as one compact ASCII JSON line ending in a newline.

    Raises ValueError if the line would exceed MAX_LINE_BYTES.
    """
    # allow_nan=False: a NaN that slipped past encode_number must fail here rather than
    # produce a line no strict JSON reader accepts.
    text = json.dumps(record, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    line = (text + "\n").encode("ascii")
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(
            f"{record.get('kind', 'record')} record is {len(line)} bytes; a metrics-file "
            f"line may be at most {MAX_LINE_BYTES} bytes (log fewer keys per call)")
    return line


def metrics_record(step: object, time_ms: int, metrics: Mapping[str, object]) -> dict[str, Any]:
    """Returns a validated `"kind": "metrics"` record."""
    checked_step = check_step(step)
    if not metrics:
        raise ValueError(f"metrics at step {checked_step}: no metrics given; "
                         "pass at least one, e.g. log(step=1, loss=0.5)")
    values = {check_key(k, "metric"): encode_number(k, v) for k, v in metrics.items()}
    return {"kind": "metrics", "step": checked_step, "time_ms": time_ms, "metrics": values}


def _flatten_params(prefix: str, params: Mapping[object, object],
                    out: dict[str, Scalar]) -> None:
    for raw_key, value in params.items():
        if not isinstance(raw_key, str):
            raise ValueError(f"param key {raw_key!r} is invalid: keys must be strings of "
                             f"{KEY_RULE}")
        key = f"{prefix}.{raw_key}" if prefix else raw_key
        if isinstance(value, Mapping):
            _flatten_params(key, value, out)
            continue
        check_key(key, "param")
        if value is None or isinstance(value, (str, bool)):
            out[key] = value
        elif isinstance(value, float):
            out[key] = encode_float(value)  # type: ignore[assignment]
        elif isinstance(value, (numbers.Real)):
            out[key] = encode_number(key, value, "param")  # type: ignore[assignment]
        else:
            raise ValueError(
                f"param {key!r}: got {type(value).__name__} {value!r:.80}; param values "
                "must be str, int, float, bool or None (nested dicts are flattened with '.')")


def params_record(time_ms: int, params: Mapping[str, object]) -> dict[str, Any]:
    """Returns a validated `"kind": "params"` record; nested mappings become dotted keys."""
    if not isinstance(params, Mapping):
        raise ValueError(f"params: must be a dict of name -> scalar, got "
                         f"{type(params).__name__}")
    flat: dict[str, Scalar] = {}
    _flatten_params("", params, flat)
    return {"kind": "params", "time_ms": time_ms, "params": flat}


def _optional_ms(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise ValueError(f"checkpoint {name}: must be an int >= 0 or None, got {value!r}")
    return int(value)


def checkpoint_record(time_ms: int, path: object, step: object,
                      started_ms: object = None, duration_ms: object = None,
                      bytes_: object = None, **extra_ms: object) -> dict[str, Any]:
    """Returns a validated `"kind": "checkpoint"` record; unknown fields are omitted.

    `extra_ms` holds further optional integer fields (e.g. snapshot_ms).
    """
    if not isinstance(path, str) or not path:
        raise ValueError(f"checkpoint path: must be a non-empty string, got {path!r}")
    record: dict[str, Any] = {"kind": "checkpoint", "time_ms": time_ms, "path": path,
                              "step": check_step(step)}
    for name, value in (("started_ms", started_ms), ("duration_ms", duration_ms),
                        ("bytes", bytes_), *extra_ms.items()):
        checked = _optional_ms(name, value)
        if checked is not None:
            record[name] = checked
    return record


PROFILE_STATUSES = ("recording", "stored", "failed")
MAX_PROFILE_MESSAGE_CHARS = 2000
PROFILE_ID_PATTERN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")


def profile_record(time_ms: int, profile_id: object, rank: int, status: str, *,
                   path: str | None = None, message: str | None = None,
                   steps: int | None = None, mode: str | None = None) -> dict[str, Any]:
    """Returns a validated `"kind": "profile"` record: what became of the profile the
    agent asked for (docs/metrics-file.md). A message is cut to 2,000 characters."""
    if not isinstance(profile_id, str) or PROFILE_ID_PATTERN.fullmatch(profile_id) is None:
        raise ValueError(f"profile id: must be 1-64 of A-Z a-z 0-9 . _ -, got {profile_id!r}")
    if status not in PROFILE_STATUSES:
        raise ValueError(f"profile status: must be one of {', '.join(PROFILE_STATUSES)}, "
                         f"got {status!r}")
    if status == "stored" and not path:
        raise ValueError("profile status stored: needs the path of the trace")
    record: dict[str, Any] = {"kind": "profile", "time_ms": time_ms, "id": profile_id,
                              "rank": rank, "status": status}
    if path is not None:
        record["path"] = path
    if message is not None:
        record["message"] = message[:MAX_PROFILE_MESSAGE_CHARS]
    if steps is not None:
        record["steps"] = steps
    if mode is not None:
        record["mode"] = mode
    return record


def decode_value(value: object) -> object:
    """Inverse of encode_number for one metric value: "NaN" etc. become floats."""
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return value


def parse_line(line: Union[str, bytes]) -> dict[str, Any]:
    """Parses one metrics-file line; metric values come back as Python numbers.

    Raises ValueError if the line is not a JSON object with a string "kind".
    """
    record = json.loads(line)
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        raise ValueError(f"metrics-file line is not an object with a string 'kind': "
                         f"{line!r:.200}")
    if record["kind"] == "metrics" and isinstance(record.get("metrics"), dict):
        record["metrics"] = {k: decode_value(v) for k, v in record["metrics"].items()}
    return record
