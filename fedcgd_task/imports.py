"""Objects named in the run config by import path: a researcher's policy, data set or model.

Two forms: ``package.module:Name`` (:func:`pkgutil.resolve_name`; the package must be importable
where it is needed) and ``/absolute/path/file.py:Name`` (loaded as a module of its own; the file
must exist at that path where it is needed). No flwr, no torch.
"""

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

#: ``package.module:Name`` (dotted module path, a colon, an attribute path).
_MODULE_REFERENCE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)*$"
)
#: ``/abs/file.py:Name``.
_FILE_REFERENCE = re.compile(r"^(/.+\.py):([A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_]\w*)*)$")

#: The app's own packages: a frame in them is not the researcher's code.
APP_PACKAGES = frozenset(
    "channel client_app experiments fedcgd_strategy fedcgd_task server_app".split()
)
#: Python's and the environment's library folders.
_LIBRARIES = tuple({sysconfig.get_path(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")})
#: A terminal escape code (colour, bold, ...).
_ESCAPE_CODE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

#: What the error messages say a reference looks like.
REFERENCE_FORMS = "'package.module:Name' (importable) or '/absolute/path/file.py:Name'"

#: A function a setting names (a data-set or a model function).
FunctionT = TypeVar("FunctionT", bound=Callable[..., object])


def is_reference(value: str) -> bool:
    """True when ``value`` names an object by import path (it holds a colon)."""
    return ":" in value


def first_line(err: BaseException) -> str:
    """The first line of an error's message (its type's name when the message is empty).

    Terminal escape codes are dropped and other control characters become ``?``; where the
    researcher's code raised it follows (:func:`user_frame`).
    """
    line = _ESCAPE_CODE.sub("", (str(err).strip().splitlines() or [type(err).__name__])[0])
    return "".join(c if c.isprintable() else "?" for c in line) + user_frame(err)


def said(err: BaseException) -> str:
    """``Type: first line (file.py:7 in fn)``, or ``Type (file.py:7 in fn)`` for no message."""
    text = f": {first_line(err)}" if str(err).strip() else user_frame(err)
    return type(err).__name__ + text


def user_frame(err: BaseException) -> str:
    """`` (mypolicy.py:7 in schedule)``: where the researcher's code raised ``err``, or ``""``.

    The last frame of its traceback in neither the app (:data:`APP_PACKAGES`) nor Python's or
    the environment's libraries.
    """
    found, tb = "", err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        package = str(tb.tb_frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in APP_PACKAGES and not code.co_filename.startswith(("<", *_LIBRARIES)):
            found = f" ({Path(code.co_filename).name}:{tb.tb_lineno} in {code.co_name})"
        tb = tb.tb_next
    return found


def check_reference(value: str, setting: str) -> None:
    """Check that ``value`` has one of the two reference forms, without importing anything.

    Raises ValueError (one line naming the key, the value and the two allowed forms).
    """
    if not (_FILE_REFERENCE.match(value) or _MODULE_REFERENCE.match(value)):
        raise ValueError(
            f"run-config key {setting!r} = {value!r} is not a reference; allowed: {REFERENCE_FORMS}"
        )


def _load_file_module(path: Path, setting: str, value: str) -> object:
    """Load ``path`` as a module named after its path (the same file gives the same module)."""
    try:
        found = path.is_file()
    except OSError as err:  # a name longer than the file system takes, ...
        raise ValueError(
            f"run-config key {setting!r} = {value!r}: file {path} cannot be looked up "
            f"({err.strerror or type(err).__name__})"
        ) from err
    if not found:
        raise ValueError(f"run-config key {setting!r} = {value!r}: file {path} does not exist")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"fedcgd_user_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"run-config key {setting!r} = {value!r}: cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ValueError(
            f"run-config key {setting!r} = {value!r}: importing {path} raised "
            f"{type(err).__name__}: {first_line(err)}"
        ) from err
    return module


def import_object(value: str, setting: str) -> object:
    """Return the object ``value`` names (``Name`` may be dotted, e.g. ``Class.factory``).

    Raises ValueError (one line naming ``setting``, the value and what is wrong): a malformed
    reference, a module that cannot be imported or raises, a missing attribute.
    """
    check_reference(value, setting)
    where = f"run-config key {setting!r} = {value!r}"
    file_match = _FILE_REFERENCE.match(value)
    if not file_match:
        try:
            return pkgutil.resolve_name(value)
        except ModuleNotFoundError as err:
            raise ValueError(
                f"{where}: no module named {err.name!r} (put its folder on PYTHONPATH, install "
                "it, or give '/absolute/path/file.py:Name')"
            ) from err
        except AttributeError as err:
            raise ValueError(f"{where}: {first_line(err)}") from err
        except Exception as err:
            raise ValueError(
                f"{where}: importing {value.split(':')[0]!r} raised {type(err).__name__}: "
                f"{first_line(err)}"
            ) from err
    path, attribute = Path(file_match.group(1)), file_match.group(2)
    target: object = _load_file_module(path, setting, value)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{where}: {path} has no attribute {attribute!r}")
        target = getattr(target, part)
    return target


def builtin_or_function(
    value: str, setting: str, builtins: Mapping[str, FunctionT | str], kind: str, contract: str
) -> FunctionT:
    """Return the function ``value`` names: a key of ``builtins``, or the researcher's reference.

    A built-in given as ``module:name`` is imported when named. ``kind`` names what the setting
    names (``"data set"``), ``contract`` what the function must be; both appear in the one-line
    ValueError for an unknown name, a reference that cannot be imported, or a non-callable.
    """
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
