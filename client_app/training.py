"""Re-export of :mod:`task.training` (kept so that existing imports keep working)."""

from task.training import compute_device as compute_device
from task.training import dropout_seed as dropout_seed
from task.training import evaluate as evaluate
from task.training import local_batches as local_batches
from task.training import train_local as train_local
