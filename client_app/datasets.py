"""Re-export of :mod:`task.datasets` (kept so that existing imports keep working)."""

from task.datasets import ImageSet as ImageSet
from task.datasets import load_cifar as load_cifar
from task.datasets import load_dataset as load_dataset
from task.datasets import load_digits_split as load_digits_split
from task.datasets import load_test_set as load_test_set
from task.datasets import load_train_set as load_train_set
