"""Re-export of :mod:`task.partition` (kept so that existing imports keep working)."""

from task.partition import apply_imbalance as apply_imbalance
from task.partition import dirichlet_partition as dirichlet_partition
from task.partition import partition_indices as partition_indices
from task.partition import shard_partition as shard_partition
