"""The `env.*` params: what a run's "environment" identity is computed from.

The server hashes the program a job runs, its non-secret environment variables and the
`env.*` params the job logs into the run's environment (docs/runs.md). This module
collects those params: the interpreter, the platform, a digest of the installed
distributions and, when the job has already imported it, torch and its CUDA version.

Collecting them reads every installed distribution's metadata (tens of milliseconds
for a few hundred), so the logger does it once, on its background thread, never in the
training loop's thread (see MetricsLogger's `log_environment`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from typing import Any, Union

Scalar = Union[str, int, float, bool, None]

# Set to 0 (or false/no/off) to stop the default logger from logging these by itself.
ENV_VAR = "TRAINYARD_LOG_ENVIRONMENT"

_NAME_SEPARATORS = re.compile(r"[-_.]+")


def enabled_by_env(env: Any) -> bool:
    """False when `env` (a mapping such as os.environ) sets TRAINYARD_LOG_ENVIRONMENT to
    0, false, no or off; True otherwise (unset included)."""
    return str(env.get(ENV_VAR, "")).strip().lower() not in ("0", "false", "no", "off")


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them: lower case, runs of -, _ and .
    become one -."""
    return _NAME_SEPARATORS.sub("-", name).lower()


def _headers(text: str | None) -> tuple[str | None, str | None]:
    """Name and Version from a METADATA/PKG-INFO text: its header block only (the email
    parser importlib.metadata uses takes ~7x as long for the same two fields)."""
    name = version = None
    for line in (text or "").splitlines():
        if not line.strip():
            break  # the end of the headers; the long description follows
        if name is None and line.startswith("Name:"):
            name = line[5:].strip() or None
        elif version is None and line.startswith("Version:"):
            version = line[8:].strip() or None
        if name is not None and version is not None:
            break
    return name, version


def _name_and_version(dist: Any) -> tuple[str | None, str | None]:
    try:
        # METADATA (wheels), PKG-INFO (egg-info directories), '' (an egg-info file).
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or dist.read_text("")
    except Exception:  # a broken distribution must not cost us the others
        text = None
    name, version = _headers(text)
    if name is None or version is None:
        try:
            meta = dist.metadata
            name = name or meta["Name"]
            version = version or meta["Version"]
        except Exception:
            pass
    return name, version


def package_lines() -> list[str]:
    """Sorted, distinct "name==version" lines of every installed distribution
    (importlib.metadata.distributions()), names normalised as PEP 503 does."""
    import importlib.metadata  # imported here: ~25-60 ms, paid on the background thread

    lines = set()
    for dist in importlib.metadata.distributions():
        name, version = _name_and_version(dist)
        if name and version:
            lines.add(f"{normalize_name(name)}=={version}")
    return sorted(lines)


def packages_sha256(lines: list[str]) -> str:
    """sha256 (hex) of the lines, each followed by a newline."""
    return hashlib.sha256("".join(line + "\n" for line in lines).encode("utf-8")).hexdigest()


def _torch_params() -> dict[str, Scalar]:
    """env.torch and env.cuda, from a torch the job has already imported (never imports
    it: that takes seconds and may initialise CUDA)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    out: dict[str, Scalar] = {}
    version = getattr(torch, "__version__", None)  # absent while torch is still importing
    if version is not None:
        out["env.torch"] = str(version)
    cuda = getattr(getattr(torch, "version", None), "cuda", None)  # None on CPU builds
    if cuda is not None:
        out["env.cuda"] = str(cuda)
    return out


def environment_params() -> dict[str, Scalar]:
    """The env.* params of this process. May raise; the logger catches and skips."""
    import platform  # here, like importlib.metadata: off `import trainyard`'s path

    lines = package_lines()
    params: dict[str, Scalar] = {
        "env.python": platform.python_version(),
        "env.python_implementation": platform.python_implementation(),
        "env.platform": f"{sys.platform}-{platform.machine()}",
        "env.packages_sha256": packages_sha256(lines),
        "env.packages": len(lines),
    }
    params.update(_torch_params())
    return params
