"""Objects named by ``package.module:Name`` or ``/absolute/path/file.py:Name``, and the one
line that says where the researcher's code raised.
"""  # noqa: D205

from __future__ import annotations

import hashlib
import importlib.util
import pkgutil
import re
import sys
import sysconfig
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar, cast

_MODULE_REFERENCE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)*$"
)
_FILE_REFERENCE = re.compile(r"^(/.+\.py):([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)*)$")

#: The project's packages (pyproject.toml's wheel): their frames are not the researcher's code.
APP_PACKAGES = frozenset(
    "channel client_app experiments fedcgd_config fedcgd_strategy fedcgd_task server_app".split()
)
_LIBRARIES = tuple({sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")})
_ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

REFERENCE_FORMS = "'package.module:Name' (importable) or '/absolute/path/file.py:Name'"

FunctionT = TypeVar("FunctionT", bound=Callable[..., object])


def is_reference(value: str) -> bool:
    """Whether ``value`` names an object by import path (a colon)."""
    return ":" in value


def first_line(err: BaseException) -> str:
    """An error's first line, printable (or its type's name), then :func:`user_frame`."""
    line = _ESCAPE_CODE.sub("", (str(err).strip().splitlines() or [type(err).__name__])[0])
    return "".join(c if c.isprintable() else "?" for c in line) + user_frame(err)


def said(err: BaseException) -> str:
    """``Type: first line (file.py:7 in fn)``, or ``Type (file.py:7 in fn)`` for no message."""
    text = f": {first_line(err)}" if str(err).strip() else user_frame(err)
    return type(err).__name__ + text


def user_frame(err: BaseException) -> str:
    """`` (mypolicy.py:7 in schedule)``: ``err``'s last frame in neither the app nor a library."""
    found, tb = "", err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        package = str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in APP_PACKAGES and not code.co_filename.startswith(("<", *_LIBRARIES)):
            found = f" ({Path(code.co_filename).name}:{tb.tb_lineno} in {code.co_name})"
        tb = tb.tb_next
    return found


def check_reference(value: str, setting: str) -> None:
    """Refuse a ``value`` of neither reference form (ValueError), importing nothing."""
    if not (_FILE_REFERENCE.match(value) or _MODULE_REFERENCE.match(value)):
        raise ValueError(
            f"run-config key {setting!r} = {value!r} is not a reference; allowed: {REFERENCE_FORMS}"
        )


def import_object(value: str, setting: str) -> object:
    """The object ``value`` names (a file loaded once); ValueError naming ``setting`` and why."""
    check_reference(value, setting)
    where = f"run-config key {setting!r} = {value!r}"
    file_match = _FILE_REFERENCE.match(value)
    if file_match:
        path, attribute = Path(file_match.group(1)), file_match.group(2)
        try:
            found = path.is_file()
        except OSError as err:  # a name longer than the file system takes, ...
            why = err.strerror or type(err).__name__
            raise ValueError(f"{where}: file {path} cannot be looked up ({why})") from err
        if not found:
            raise ValueError(f"{where}: file {path} does not exist")
    try:
        if not file_match:
            return pkgutil.resolve_name(value)
        name = f"fedcgd_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None  # a .py file
            sys.modules[name] = module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    except Exception as err:  # a file's own import failing: its type, message and line
        if not file_match and isinstance(err, ModuleNotFoundError):
            raise ValueError(
                f"{where}: no module named {err.name!r} (put its folder on PYTHONPATH, install "
                "it, or give '/absolute/path/file.py:Name')"
            ) from err
        if not file_match and isinstance(err, AttributeError):
            raise ValueError(f"{where}: {first_line(err)}") from err
        what = path if file_match else repr(value.split(":")[0])
        raise ValueError(f"{where}: importing {what} raised {said(err)}") from err
    target: object = sys.modules[name]
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{where}: {path} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def builtin_or_function(
    value: str, setting: str, builtins: Mapping[str, FunctionT | str], kind: str, contract: str
) -> FunctionT:
    """The function ``value`` names: a key of ``builtins`` (a ``module:name`` imported when
    named) or a reference (ValueError saying ``kind`` and ``contract``)."""  # noqa: D205, D209
    builtin = builtins.get(value)
    if isinstance(builtin, str):
        return cast(FunctionT, pkgutil.resolve_name(builtin))
    if builtin is not None:
        return builtin
    where = f"run-config key {setting!r} = {value!r}"
    if not is_reference(value):
        names = ", ".join(f'"{n}"' for n in builtins)
        raise ValueError(
            f"{where} is not a {kind}; allowed: {names} or a {kind.replace(' ', '-')} function "
            f"{REFERENCE_FORMS}"
        )
    function = import_object(value, setting)
    if not callable(function):
        raise ValueError(
            f"{where} names an object of type {type(function).__name__}, not a function; "
            f"allowed: {contract}"
        )
    return cast(FunctionT, function)  # its result is checked where it is called


def reference_label(value: str) -> str:
    """A file-name-safe label for a reference (``pkg.mod:Fair`` -> ``Fair``); names unchanged."""
    if not is_reference(value):
        return value
    return re.sub(r"[^A-Za-z0-9_.-]", "-", value.rsplit(":", 1)[1])
