"""The three classifiers: digits MLP, the paper's CIFAR-10 CNN, ResNet-18 with GroupNorm.

Paper Section V: CIFAR-10 uses a small CNN, CIFAR-100 a ResNet-18 whose BatchNorm layers are
replaced by GroupNorm. The MLP serves the offline ``digits`` default. Parameter counts:

* ``mlp`` (1 x 8 x 8, 10 classes): 64*64 + 64 + 64*10 + 10 = 4,810.
* ``cnn`` (3 x 32 x 32, 10 classes): 258,898 (arithmetic in :class:`PaperCNN`).
* ``resnet18gn`` (100 classes): 11,227,812, the same as torchvision's ResNet-18 with BatchNorm
  (GroupNorm also has one weight and one bias per channel).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

#: Model names :func:`build_model` accepts.
MODEL_NAMES: tuple[str, ...] = ("mlp", "cnn", "resnet18gn")
#: Hidden width of the digits MLP.
MLP_HIDDEN = 64
#: GroupNorm groups in ``resnet18gn``: 32 (the GroupNorm paper's default, Wu & He 2018); every
#: ResNet-18 width (64, 128, 256, 512) is divisible by it.
RESNET_GN_GROUPS = 32


class DigitsMLP(nn.Module):
    """Flatten -> Linear(in, 64) -> ReLU -> Linear(64, C)."""

    def __init__(self, num_classes: int, input_shape: Sequence[int]) -> None:
        super().__init__()
        in_features = math.prod(input_shape)
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(in_features, MLP_HIDDEN),
            nn.ReLU(),
            nn.Linear(MLP_HIDDEN, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images [n, *input_shape] to logits [n, C]."""
        return self.net(x)


class PaperCNN(nn.Module):
    """The CIFAR-10 CNN of paper Section V, with unpadded 3 x 3 convolutions.

    [conv3x3-32, ReLU, conv3x3-32, ReLU, maxpool 2, dropout 0.2] ->
    [conv3x3-64, ReLU, conv3x3-64, ReLU, maxpool 2, dropout 0.3] -> FC 120 + ReLU -> FC C.

    For a 3 x 32 x 32 input the spatial size goes 32 -> 30 -> 28 -> 14 -> 12 -> 10 -> 5, so the
    flatten size is 64 * 5 * 5 = 1600, and with C = 10 the parameter count is
    (3*9*32 + 32) + (32*9*32 + 32) + (32*9*64 + 64) + (64*9*64 + 64) + (1600*120 + 120)
    + (120*10 + 10) = 896 + 9,248 + 18,496 + 36,928 + 192,120 + 1,210 = 258,898.
    Other input sizes get the flatten size from the same arithmetic.
    """

    def __init__(self, num_classes: int, input_shape: Sequence[int]) -> None:
        super().__init__()
        channels, height, width = (int(s) for s in input_shape)
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(32, 32, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(0.2),
            nn.Conv2d(32, 64, kernel_size=3),
            nn.ReLU(),
            nn.Conv2d(64, 64, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Dropout(0.3),
        )
        out_h, out_w = _cnn_feature_size(height), _cnn_feature_size(width)
        if out_h < 1 or out_w < 1:
            raise ValueError(
                f"input_shape {tuple(input_shape)} is too small for the cnn: height and width "
                "must be at least 16"
            )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * out_h * out_w, 120),
            nn.ReLU(),
            nn.Linear(120, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map images [n, C_in, H, W] to logits [n, C]."""
        return self.classifier(self.features(x))


def _cnn_feature_size(size: int) -> int:
    """Spatial size after the CNN's two (conv, conv, pool) blocks: ((s - 4) // 2 - 4) // 2."""
    return ((size - 4) // 2 - 4) // 2


def _group_norm(num_channels: int) -> nn.Module:
    """GroupNorm with :data:`RESNET_GN_GROUPS` groups (torchvision's ``norm_layer`` hook)."""
    return nn.GroupNorm(RESNET_GN_GROUPS, num_channels)


def _resnet18_gn(num_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """Torchvision's ResNet-18 with GroupNorm; the stem takes ``input_shape[0]`` channels."""
    from torchvision.models import resnet18

    model = resnet18(weights=None, num_classes=num_classes, norm_layer=_group_norm)
    in_channels = int(input_shape[0])
    if in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


def build_model(
    name: str, num_classes: int, input_shape: Sequence[int], *, seed: int = 0
) -> nn.Module:
    """Build a freshly initialised classifier.

    Parameters
    ----------
    name : str
        ``"mlp"``, ``"cnn"`` or ``"resnet18gn"``.
    num_classes : int
        Number of output logits C >= 1.
    input_shape : sequence of int
        (channels, height, width) of one input image.
    seed : int
        Seed of the weight initialisation. The draws run under :func:`torch.random.fork_rng`,
        so the global torch RNG is neither used nor changed.

    Returns
    -------
    torch.nn.Module
        The model on the CPU, in training mode.

    """
    if num_classes < 1:
        raise ValueError(f"num_classes must be an integer >= 1; got {num_classes}")
    if len(input_shape) != 3 or any(int(s) < 1 for s in input_shape):
        raise ValueError(
            f"input_shape must be (channels, height, width) of positive ints; got {input_shape}"
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if name == "mlp":
            return DigitsMLP(num_classes, input_shape)
        if name == "cnn":
            return PaperCNN(num_classes, input_shape)
        if name == "resnet18gn":
            return _resnet18_gn(num_classes, input_shape)
    allowed = ", ".join(f'"{n}"' for n in MODEL_NAMES)
    raise ValueError(f"model name must be one of {allowed}; got {name!r}")


def count_parameters(model: nn.Module) -> int:
    """Return the number of scalar parameters of ``model`` (trainable or not, no buffers)."""
    return sum(p.numel() for p in model.parameters())
