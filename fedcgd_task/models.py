"""Model functions ``(num_classes, input_shape) -> torch.nn.Module``, built-in (paper Section
V: CIFAR-10's CNN, CIFAR-100's ResNet-18-GN; the MLP for any shape; MNIST-1D's ``cnn1d``) or yours.
"""  # noqa: D205

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from fedcgd_config.imports import builtin_or_function, said
from fedcgd_config.schema import MODELS
from fedcgd_task.training import seeded_generators

#: What a model function is: ``(num_classes, input_shape) -> torch.nn.Module``.
ModelFunction = Callable[[int, tuple[int, ...]], nn.Module]
#: The contract, as the error messages state it.
MODEL_CONTRACT = (
    "a function (num_classes, input_shape) -> torch.nn.Module whose output on inputs "
    "[N, *input_shape] is [N, num_classes]"
)
#: Hidden width of the digits MLP.
MLP_HIDDEN = 64
#: GroupNorm groups in ``resnet18gn`` (Wu & He 2018's default; divides every ResNet-18 width).
RESNET_GN_GROUPS = 32


class DigitsMLP(nn.Module):
    """Flatten -> Linear(prod(input_shape), 64) -> ReLU -> Linear(64, C), for any input shape."""

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
    """The CIFAR-10 CNN of paper Section V (unpadded 3 x 3 convolutions; 258,898 parameters).

    [conv3x3-32, ReLU, conv3x3-32, ReLU, maxpool 2, dropout 0.2] ->
    [conv3x3-64, ReLU, conv3x3-64, ReLU, maxpool 2, dropout 0.3] -> FC 120 + ReLU -> FC C.
    """

    def __init__(self, num_classes: int, input_shape: Sequence[int]) -> None:
        super().__init__()
        channels, height, width = _image_shape(input_shape, "cnn")
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
        # Two (conv, conv, pool) blocks: size s becomes ((s - 4) // 2 - 4) // 2.
        out_h, out_w = (((size - 4) // 2 - 4) // 2 for size in (height, width))
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


#: Channels of each of the cnn1d's convolutions (MNIST-1D's ``ConvBase``).
CNN1D_CHANNELS = 25
#: Kernel sizes of the cnn1d's three convolutions; each has stride 2 and zero padding 1.
CNN1D_KERNELS: tuple[int, int, int] = (5, 3, 3)


class Mnist1dCNN(nn.Module):
    """MNIST-1D's ``ConvBase`` (Greydanus & Kobak 2024): three Conv1d (k 5, 3, 3; 25 channels,
    stride 2, padding 1) + FC; 1 x 40: 40 -> 19 -> 10 -> 5, 5,210 parameters (C = 10)."""  # noqa: D205, D209

    def __init__(self, num_classes: int, input_shape: Sequence[int]) -> None:
        super().__init__()
        if len(input_shape) != 2:
            raise ValueError(
                f"input_shape {tuple(input_shape)} is not (channels, length): the cnn1d takes "
                "sequences"
            )
        channels, length = (int(s) for s in input_shape)
        layers: list[nn.Module] = []
        for kernel in CNN1D_KERNELS:
            layers += [
                nn.Conv1d(channels, CNN1D_CHANNELS, kernel_size=kernel, stride=2, padding=1),
                nn.ReLU(),
            ]
            channels, length = CNN1D_CHANNELS, (length + 2 - kernel) // 2 + 1
            if length < 1:
                raise ValueError(
                    f"input_shape {tuple(input_shape)} is too small for the cnn1d: the length "
                    "must be at least 3"
                )
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(CNN1D_CHANNELS * length, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map sequences [n, C_in, L] to logits [n, C]."""
        return self.classifier(self.features(x))


def _image_shape(input_shape: Sequence[int], model: str) -> tuple[int, int, int]:
    """(channels, height, width), or ValueError: ``model`` takes images."""
    if len(input_shape) != 3:
        raise ValueError(
            f"input_shape {tuple(input_shape)} is not (channels, height, width): the {model} "
            "takes images"
        )
    channels, height, width = (int(s) for s in input_shape)
    return channels, height, width


def _resnet18_gn(num_classes: int, input_shape: Sequence[int]) -> nn.Module:
    """Torchvision's ResNet-18 with GroupNorm; the stem takes ``input_shape[0]`` channels."""
    from torchvision.models import resnet18

    in_channels = _image_shape(input_shape, "resnet18gn")[0]
    norm = functools.partial(nn.GroupNorm, RESNET_GN_GROUPS)  # torchvision's norm_layer hook
    model = resnet18(weights=None, num_classes=num_classes, norm_layer=norm)
    if in_channels != 3:
        model.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    return model


#: The built-in models: run-config name (the schema's, ``auto`` aside) -> model function.
BUILTIN_MODELS: dict[str, ModelFunction] = dict(
    zip(MODELS[1:], (DigitsMLP, PaperCNN, _resnet18_gn, Mnist1dCNN), strict=True)
)


def model_function(name: str) -> ModelFunction:
    """The model function ``name`` names: a built-in, or the researcher's reference."""
    return builtin_or_function(name, "model", BUILTIN_MODELS, "model", MODEL_CONTRACT)


def build_model(
    name: str, num_classes: int, input_shape: Sequence[int], *, seed: int = 0
) -> nn.Module:
    """A classifier from the model function ``name``, built seeded (built-ins: CPU, training
    mode); ValueError, one line: a bad name, a raise, or no torch.nn.Module."""  # noqa: D205, D209
    shape = tuple(int(s) for s in input_shape)
    function = model_function(name)
    with seeded_generators(seed):
        torch.manual_seed(seed)  # every device's generator too, for a model built on a GPU
        try:
            model = function(num_classes, shape)
        except ValueError:  # the function's own account of sizes it cannot take
            raise
        except Exception as err:  # the researcher's code: one line with where it raised
            raise ValueError(
                f"the model function raised {said(err)} (called with num_classes={num_classes}, "
                f"input_shape={shape})"
            ) from err
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"the model function returned a {type(model).__name__}, not a torch.nn.Module"
        )
    return model


def count_parameters(model: nn.Module) -> int:
    """Scalar parameters of ``model`` (trainable or not, no buffers)."""
    return sum(p.numel() for p in model.parameters())
