"""One run-config setting (listed in :mod:`fedcgd_config.schema`) and the check of a value."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fedcgd_config.imports import REFERENCE_FORMS, check_reference, is_reference

#: What a string holds beyond its type (:meth:`Setting.allowed` says it in words).
Form = Literal["value", "reference", "path", "absolute-path", "table", "class", "device"]

#: Longest string value (PATH_MAX); the tables have their own limit (server_app.config).
MAX_SETTING_CHARS = 4096
#: Longest folder or file name in a path value (NAME_MAX, in UTF-8 bytes).
MAX_NAME_BYTES = 255
#: The integers Flower's records hold.
INT64_RANGE = (-(2**63), 2**63 - 1)
Scalar = bool | int | float | str
CUDA_INDEX = re.compile(r"cuda:(0|[1-9][0-9]{0,3})")


@dataclass(frozen=True)
class Setting:
    """One run-config key: type (the default's), default, help, allowed values.

    ``limits``: ``">= 1"``, ``"> 0"``, ``"[0, 1]"``, ``"(0, 5000]"``; ``why``: said on refusal;
    ``computes``: False where it only says where or how a run runs (a resume may change it).
    """

    key: str
    default: Scalar
    help: str
    limits: str = ""
    choices: tuple[str, ...] = ()
    form: Form = "value"
    multiple_of: int | None = None
    why: str = ""
    computes: bool = True

    @property
    def minimum(self) -> float | None:
        """The interval's lower end (None: none)."""
        if not self.limits:
            return None
        low = self.limits[1:].split(",")[0] if self.limits[0] in "[(" else self.limits.split()[1]
        return type(self.default)(low)  # type: ignore[return-value]

    @property
    def maximum(self) -> float | None:
        """The interval's upper end, inclusive (None: none)."""
        if not self.limits or self.limits[0] not in "[(":
            return None
        return type(self.default)(self.limits[:-1].split(", ")[1])  # type: ignore[return-value]

    @property
    def above(self) -> bool:
        """Whether :attr:`minimum` is excluded."""
        return self.limits.startswith(("(", "> "))

    def allowed(self) -> str:
        """What is allowed, in words: ``an integer in [1, 100000]``, ``one of "a", "b"``."""
        kind = type(self.default)
        if kind is bool:
            return "true or false"
        if kind in (int, float):
            text = "an integer" if kind is int else "a finite number"
            if self.limits:
                text += f" in {self.limits}" if self.limits[0] in "[(" else f" {self.limits}"
            return text + (f", a multiple of {self.multiple_of}" if self.multiple_of else "")
        options = "one of " + ", ".join(f'"{choice}"' for choice in self.choices)
        return {
            "reference": f"{options} or a function {REFERENCE_FORMS}",
            "class": f"{options} or a class {REFERENCE_FORMS}"
            if self.choices
            else 'a string: a built-in name or "package.module:ClassName"',
            "device": f'{options} or "cuda:N" (N = 0, 1, ...)',
            "absolute-path": 'an absolute path, or ""',
            "path": 'a folder path, or ""',
            "table": 'a TOML inline table in a string ("{name = value}")',
        }.get(self.form, options if self.choices else "a string")


def check_path_names(value: str, key: str, *, label: str | None = None) -> str:
    """``value`` if printable UTF-8 with names of at most :data:`MAX_NAME_BYTES` (ValueError)."""
    where = label or f"run-config key '{key}'"
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError(
            f"{where} = {value[:80]!r} holds a control character (a newline, a "
            "tab, NUL, ...); allowed: a path of printable characters"
        )
    if any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        raise ValueError(
            f"{where} = {value[:80]!r} holds a name that is not valid UTF-8; "
            "allowed: a path of Unicode characters (rename the folder)"
        )
    for name in Path(value).parts:
        size = len(name.encode("utf-8", errors="surrogateescape"))
        if size > MAX_NAME_BYTES:
            raise ValueError(
                f"{where} holds a folder or file name of {size} bytes "
                f"({name[:40]!r}...); allowed: at most {MAX_NAME_BYTES} bytes per name"
            )
    return value


def check_value(setting: Setting, value: Any, where: str) -> Scalar:
    """``value`` as ``setting``'s type (``~`` expanded), or ValueError: ``<where> must be <allowed>
    (<why>); got <value>``."""  # noqa: D205, D209
    kind = type(setting.default)
    why = f" ({setting.why})" if setting.why else ""
    refused = ValueError(f"{where} must be {setting.allowed()}{why}; got {value!r}")
    if kind is bool or isinstance(value, bool):
        if kind is not bool or not isinstance(value, bool):
            raise refused
        return value
    if kind in (int, float):
        if not isinstance(value, int | float) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise refused
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise refused
        number: int | float = int(value) if kind is int else float(value)
        low, high = setting.minimum, setting.maximum
        if (low is not None and (number <= low if setting.above else number < low)) or (
            (high is not None and number > high)
            or (setting.multiple_of and int(number) % setting.multiple_of)
        ):
            raise refused
        if kind is int and not INT64_RANGE[0] <= number <= INT64_RANGE[1]:
            end = f"at most {INT64_RANGE[1]}" if number > 0 else f"at least {INT64_RANGE[0]}"
            raise ValueError(f"{where} must be {setting.allowed()} and {end} (Flower's records "
                             f"hold 64-bit integers); got {value!r}")  # fmt: skip
        return number
    if not isinstance(value, str):
        raise refused
    if setting.form != "table" and len(value) > MAX_SETTING_CHARS:
        raise ValueError(
            f"{where} holds {len(value)} characters ({value[:40]!r}...); "
            f"allowed: at most {MAX_SETTING_CHARS}"
        )
    if value in setting.choices or (setting.form == "device" and CUDA_INDEX.fullmatch(value)):
        return value
    if setting.form in ("reference", "class") and is_reference(value):
        check_reference(value, setting.key)
        return value
    if setting.choices:
        raise refused
    if setting.form in ("path", "absolute-path") and value:
        check_path_names(value, setting.key, label=where)
        if setting.form == "absolute-path":
            if not Path(value).expanduser().is_absolute():
                raise ValueError(
                    f"{where} = {value!r} must be an absolute path (the ServerApp runs in an "
                    'unrelated working directory), or ""'
                )
            return str(Path(value).expanduser())
    return value


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """``"did you mean a or b? "``: up to three of ``known`` close to ``word`` (difflib), or ""."""
    scored = sorted((difflib.SequenceMatcher(None, word, k).ratio(), k) for k in known)[::-1]
    close = [k for ratio, k in scored[:3] if ratio >= max(0.6, scored[0][0] - 0.1)]
    return f"did you mean {' or '.join(close)}? " if close else ""
