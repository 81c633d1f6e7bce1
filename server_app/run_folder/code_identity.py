"""Which code computed a run: a digest of the computing packages' sources and the libraries.

See docs/design.md, "Which code computed a run".
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

#: The packages whose sources decide what a run computes (not plots, launchers, benchmarks).
COMPUTING_PACKAGES = ("channel", "client_app", "fedcgd_strategy", "fedcgd_task", "server_app")
#: Libraries whose versions can change a run's arithmetic.
LIBRARIES = ("numpy", "scipy", "torch", "flwr")
#: The key of ``config.json`` that holds the list of code entries.
CODE_KEY = "code"
_ROOT = Path(__file__).resolve().parents[2]


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def source_digest(root: Path, packages: Sequence[str], versions: Mapping[str, str]) -> str:
    """SHA-256 (16 hex digits) of ``packages``' ``.py`` files and ``versions``.

    Each file: its path, NUL, its bytes, NUL, in path order; then ``name=version`` lines, sorted.
    """
    digest = hashlib.sha256()
    paths = sorted(p for package in packages for p in (root / package).rglob("*.py"))
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for name in sorted(versions):
        digest.update(f"{name}={versions[name]}\n".encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def code_identity() -> dict[str, Any]:
    """The checkout's ``{"digest": ..., "versions": {...}}`` (computed once per process)."""
    versions = {name: _version(name) for name in LIBRARIES}
    versions["python"] = platform.python_version()
    return {"digest": source_digest(_ROOT, COMPUTING_PACKAGES, versions), "versions": versions}


def code_entries(
    recorded: Mapping[str, Any] | None, from_round: int, current: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The ``code`` list of ``config.json`` (a resume adds ``current`` if its digest is new)."""
    entry = {**current, "from_round": from_round}
    kept = recorded.get(CODE_KEY) if recorded is not None else None
    if not isinstance(kept, list) or not all(
        isinstance(e, dict) and isinstance(e.get("digest"), str) for e in kept
    ):
        unknown = {"digest": "unknown", "versions": {}, "from_round": 1}  # recorded none
        return [entry] if recorded is None or from_round == 1 else [unknown, entry]
    if kept and kept[-1]["digest"] == current["digest"]:
        return [dict(e) for e in kept]
    return [*(dict(e) for e in kept), entry]


def run_digests(config: Mapping[str, Any] | None) -> str:
    """The digests of a run's ``config.json`` in order, space-separated ("unknown": none)."""
    kept = config.get(CODE_KEY) if config is not None else None
    if not isinstance(kept, list) or not kept:
        return "unknown"
    return " ".join(str(e.get("digest", "unknown")) for e in kept if isinstance(e, dict))


def mixed_code_line(digests: Sequence[str]) -> str | None:
    """A warning when runs (their :func:`run_digests`) come from more than one code; else None."""
    distinct = sorted({d for run in digests for d in run.split()})
    if len(distinct) <= 1:
        return None
    return (
        f"warning: these {len(digests)} runs were computed by {len(distinct)} versions of the "
        f"code ({', '.join(distinct)}; runs.csv's code column says which): their differences "
        "may come from the code, not from the settings"
    )
