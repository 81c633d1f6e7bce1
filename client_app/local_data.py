"""Re-export of :mod:`task.local_data` (kept so that existing imports keep working)."""

from task.local_data import LocalSplit as LocalSplit
from task.local_data import local_split as local_split
