"""The run config as the commands take it: parsed, checked, rendered for ``flwr run`` (TOML)."""

from __future__ import annotations

import contextlib
import re
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import tomli_w

from fedcgd_config.schema import flatten
from fedcgd_config.settings import default_run_config, resolve_data_dir, set_nested

_ITEM_SEPARATORS = " \t\r\n"


def format_run_config(values: Mapping[str, Any]) -> str:
    """``values`` as one line of ``--run-config`` text (ValueError: a value TOML cannot hold)."""
    from server_app.config import fold_policy_params, format_toml_value

    folded = fold_policy_params(values)
    return " ".join(f"{key}={format_toml_value(value, key)}" for key, value in folded.items())


def with_resolved_data_dir(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """``run_config`` with ``data-dir`` made absolute here (the apps run elsewhere)."""
    data_dir = resolve_data_dir(str(run_config.get("data-dir", "")))
    return {**run_config, "data-dir": str(data_dir)}


def run_config_toml(values: Mapping[str, Any]) -> str:
    """``values`` as a TOML document for ``flwr run --run-config FILE.toml`` (any string)."""
    from server_app.config import fold_policy_params, format_toml_value

    nested: dict[str, Any] = {}
    for key, value in fold_policy_params(values).items():
        format_toml_value(value, key)  # a one-line error for a value TOML cannot hold
        set_nested(nested, key, value, key=key, clash="is given twice")
    return tomli_w.dumps(nested)


@contextlib.contextmanager
def run_config_file(values: Mapping[str, Any]) -> Iterator[Path]:
    """A temporary ``run-config.toml`` holding ``values``, removed on exit."""
    text = run_config_toml(values)
    with tempfile.TemporaryDirectory(prefix="fedcgd-run-config-") as folder:
        (Path(folder) / "run-config.toml").write_text(text, encoding="utf-8")
        yield Path(folder) / "run-config.toml"


def split_run_config_text(text: str) -> list[str]:
    """The ``key=value`` items of ``--run-config`` text: each the shortest piece read as TOML."""
    items: list[str] = []
    start = 0
    for end in [*(m.start() for m in re.finditer(f"[{_ITEM_SEPARATORS}]", text)), len(text)]:
        piece = text[start:end].strip(_ITEM_SEPARATORS)
        if piece:
            try:
                tomllib.loads(piece)
            except (tomllib.TOMLDecodeError, RecursionError):
                continue  # inside a string, array or table: the item goes on
            items.append(piece)
        start = end
    rest = text[start:].strip(_ITEM_SEPARATORS)
    return [*items, rest] if rest else items


def parse_run_config_text(text: str) -> dict[str, Any]:
    """``--run-config`` text as a flat dict (dotted keys stay dotted; ValueError: one line)."""
    values: dict[str, Any] = {}
    for item in split_run_config_text(text):
        shown = item if len(item) <= 80 else item[:77] + "..."
        try:
            pairs = flatten(tomllib.loads(item))
        except (tomllib.TOMLDecodeError, RecursionError) as err:
            raise ValueError(
                f"--run-config item {shown!r} is not key=value with a TOML value "
                "(quote strings: policy='bc')"
            ) from err
        if not pairs:
            raise ValueError(f"--run-config item {shown!r} sets no key; allowed: key=value")
        for key, value in pairs.items():
            if key in values:
                raise ValueError(
                    f"run-config key {key!r} is given twice ({values[key]!r} and {value!r}); "
                    "give it once"
                )
            values[key] = value
    return values


def validated_run_config(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults with ``overrides`` applied, every key and value checked (ValueError)."""
    from fedcgd_config.schema import unknown_key
    from server_app.config import (
        check_components,
        fold_policy_params,
        parse_run_config,
        with_canonical_policy,
    )

    defaults = default_run_config()
    overrides = fold_policy_params(overrides)  # Flower accepts declared keys only
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(unknown_key(unknown[0]))
    merged = with_canonical_policy({**defaults, **overrides})
    check_components(parse_run_config(merged))
    return merged
