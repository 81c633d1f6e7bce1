"""One run-config setting: its type, default, allowed values and help, and the check of a value.

:class:`Setting` describes a key; :func:`check_value` checks a value against it and
:func:`check_path_names` a path's characters and names. The settings themselves are listed in
:mod:`fedcgd_task.schema`. Imports neither flwr nor torch.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from fedcgd_task.imports import REFERENCE_FORMS, check_reference, is_reference

#: What a string setting holds beyond its type: ``value`` (a plain value or one of
#: ``choices``), ``reference`` (one of ``choices`` or the researcher's function
#: ``"package.module:function"``), ``path`` (a folder, ``""`` = a default), ``absolute-path``
#: (an absolute path or ``""``), ``table`` (a TOML inline table in a string, read by
#: :mod:`server_app.config`), ``class`` (a built-in name, one of ``choices`` if any, or
#: ``"package.module:Class"``, checked where it is built), ``device`` (one of ``choices`` or
#: ``"cuda:N"``, a torch device).
Form = Literal["value", "reference", "path", "absolute-path", "table", "class", "device"]

#: Longest string value of any run-config key (PATH_MAX, the longest path Linux opens); the
#: parameter tables have their own limit (:data:`server_app.config.MAX_PARAMS_CHARS`).
MAX_SETTING_CHARS = 4096
#: Longest folder or file name in a path value (NAME_MAX, in UTF-8 bytes).
MAX_NAME_BYTES = 255
#: The integers every int setting stays within: Flower's records hold 64-bit integers.
INT64_RANGE = (-(2**63), 2**63 - 1)

Scalar = bool | int | float | str

#: A numbered CUDA device, ``cuda:N`` (form ``device``).
CUDA_INDEX = re.compile(r"cuda:(0|[1-9][0-9]{0,3})")


@dataclass(frozen=True)
class Setting:
    """One run-config key: its type (that of ``default``), default, allowed values and help.

    Attributes
    ----------
    key : str
        The run-config key (kebab case; ``channel.*`` keys dotted).
    default : bool, int, float or str
        The default as pyproject.toml holds it; its type is the setting's (an integral float such
        as ``64.0`` passes for an int setting).
    help : str
        One line (Markdown) for the docs table.
    limits : str
        A number's interval as :meth:`allowed` shows it: ``">= 1"``, ``"> 0"``, ``"[0, 1]"``,
        ``"(0, 5000]"`` (read by :attr:`minimum`, :attr:`maximum`, :attr:`above`).
    choices : tuple of str
        The allowed strings (``form`` ``value``, ``reference`` or ``class``).
    form : Form
        What a string holds beyond its type (:data:`Form`).
    multiple_of : int or None
        An int setting must be a multiple of this.
    why : str
        Said after what is allowed when a value is refused.
    computes : bool
        Whether the value changes what a run computes (its checkpoint identity, folder name,
        figure labels and indicator pairing read it); False: it only says where or how the run
        runs or reports (a resume may change it).
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
        return _bounds(self.limits, type(self.default))[0]

    @property
    def maximum(self) -> float | None:
        """The interval's upper end, inclusive (None: none)."""
        return _bounds(self.limits, type(self.default))[1]

    @property
    def above(self) -> bool:
        """Whether :attr:`minimum` is excluded."""
        return self.limits.startswith(("(", ">")) and not self.limits.startswith(">=")

    @property
    def attribute(self) -> str:
        """The key as a Python name: ``channel.deadline-s`` -> ``deadline_s``."""
        return self.key.rsplit(".", 1)[-1].replace("-", "_")

    def allowed(self) -> str:
        """What is allowed, in words: ``an integer in [1, 100000]``, ``one of "a", "b"``."""
        kind = type(self.default)
        if kind is bool:
            return "true or false"
        if kind in (int, float):
            text = "an integer" if kind is int else "a finite number"
            if self.limits:
                text += f" in {self.limits}" if self.limits[0] in "[(" else f" {self.limits}"
            if self.multiple_of:
                text += f", a multiple of {self.multiple_of}"
            return text
        options = ", ".join(f'"{choice}"' for choice in self.choices)
        if self.form == "reference":
            return f"one of {options} or a function {REFERENCE_FORMS}"
        if self.form == "class" and self.choices:
            return f"one of {options} or a class {REFERENCE_FORMS}"
        if self.form == "device":
            return f'one of {options} or "cuda:N" (N = 0, 1, ...)'

        if self.choices:
            return f"one of {options}"
        if self.form == "absolute-path":
            return 'an absolute path, or ""'
        if self.form == "path":
            return 'a folder path, or ""'
        if self.form == "table":
            return 'a TOML inline table in a string ("{name = value}")'
        if self.form == "class":
            return 'a string: a built-in name or "package.module:ClassName"'
        return "a string"


def _bounds(limits: str, kind: type) -> tuple[Any, Any]:
    """The lower and upper end of ``limits`` (:attr:`Setting.limits`) as numbers of ``kind``."""
    if not limits:
        return None, None
    if limits[0] in "[(":
        low, high = limits[1:-1].split(", ")
        return kind(low), kind(high)
    return kind(limits.split()[1]), None


def check_path_names(value: str, key: str, *, label: str | None = None) -> str:
    """Return the path ``value`` if it is printable and its names fit :data:`MAX_NAME_BYTES`.

    ``label`` names the setting in the errors (default ``run-config key '<key>'``). Raises
    ValueError for a control character (a newline would break every one-line message naming the
    path), a name that is not valid UTF-8, or the first name that is too long.
    """
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
    """``value`` checked against ``setting``: an int, float, bool or str as the setting holds.

    Returns the value (an integral float of an int setting as an int, an int of a float setting as
    a float, a path with ``~`` expanded where it must be absolute). ``where`` names the setting in
    ``<where> must be <allowed> (<why>); got <value>``.
    """
    kind = type(setting.default)
    why = f" ({setting.why})" if setting.why else ""
    refused = ValueError(f"{where} must be {setting.allowed()}{why}; got {value!r}")
    if kind is bool:
        if not isinstance(value, bool):
            raise refused
        return value
    if kind in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise refused
        if isinstance(value, float) and not math.isfinite(value):
            raise refused
        if kind is int and isinstance(value, float) and not value.is_integer():
            raise refused
        number: int | float = int(value) if kind is int else float(value)
        low, high = setting.minimum, setting.maximum
        if low is not None and (number <= low if setting.above else number < low):
            raise refused
        if high is not None and number > high:
            raise refused
        if setting.multiple_of and int(number) % setting.multiple_of:
            raise refused
        if kind is int and not INT64_RANGE[0] <= number <= INT64_RANGE[1]:
            end = f"at most {INT64_RANGE[1]}" if number > 0 else f"at least {INT64_RANGE[0]}"
            raise ValueError(
                f"{where} must be {setting.allowed()} and {end} (Flower's records hold 64-bit "
                f"integers); got {value!r}"
            )
        return number
    if not isinstance(value, str):
        raise refused
    if setting.form != "table" and len(value) > MAX_SETTING_CHARS:  # tables: server_app.config
        raise ValueError(
            f"{where} holds {len(value)} characters ({value[:40]!r}...); "
            f"allowed: at most {MAX_SETTING_CHARS}"
        )
    if setting.choices and value in setting.choices:
        return value
    if setting.form in ("reference", "class") and is_reference(value):
        check_reference(value, setting.key)
        return value
    if setting.form == "device" and CUDA_INDEX.fullmatch(value):
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
