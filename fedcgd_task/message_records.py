"""One record of a Message's content, by name and type, without Flower's per-type views.

``content.config_records`` (and ``array_records``, ``metric_records``) builds a new filtered
view of the whole RecordDict at each access; a handler that reads one record reads it directly.
"""

from __future__ import annotations

from typing import TypeVar

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

R = TypeVar("R", ArrayRecord, ConfigRecord, MetricRecord)


def record_of(content: RecordDict, name: str, kind: type[R]) -> R | None:
    """``content.<kind>_records.get(name)``: the record ``name`` if it is a ``kind``, else None."""
    record = content.get(name)
    return record if isinstance(record, kind) else None
