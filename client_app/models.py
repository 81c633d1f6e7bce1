"""Re-export of :mod:`task.models` (kept so that existing imports keep working)."""

from task.models import DigitsMLP as DigitsMLP
from task.models import PaperCNN as PaperCNN
from task.models import build_model as build_model
from task.models import count_parameters as count_parameters
