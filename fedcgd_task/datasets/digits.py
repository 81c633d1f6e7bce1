"""The built-in ``digits`` data set: scikit-learn's bundled 8 x 8 digits, split 80 / 20.

1797 images of 1 x 8 x 8, x = pixel / 16; a fixed stratified split with seed
:data:`DIGITS_SPLIT_SEED` (1437 train, 360 test), the same for every run seed.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fedcgd_task.datasets.contract import LoadedData
from fedcgd_task.datasets.splits import ImageSet

#: Seed of the fixed stratified train / test split of the digits set.
DIGITS_SPLIT_SEED = 0
#: Share of the digits set used as test set.
DIGITS_TEST_FRACTION = 0.2
#: Largest intensity in scikit-learn's digits images.
DIGITS_MAX_INTENSITY = 16.0


def load_digits_split() -> tuple[ImageSet, ImageSet]:
    """Load scikit-learn's digits and split it 80 / 20, stratified, with split seed 0."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    pixels = np.asarray(bunch.images, dtype=np.uint8).reshape(-1, 1, 8, 8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    idx_train, idx_test = train_test_split(
        np.arange(labels.size),
        test_size=DIGITS_TEST_FRACTION,
        random_state=DIGITS_SPLIT_SEED,
        stratify=labels,
    )
    idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)

    def subset(rows: npt.NDArray[np.int64]) -> ImageSet:
        return ImageSet(
            pixels=pixels[rows],
            labels=labels[rows],
            num_classes=10,
            scale=1.0 / DIGITS_MAX_INTENSITY,
            mean=(0.0,),
            std=(1.0,),
        )

    return subset(idx_train), subset(idx_test)


def digits_data() -> LoadedData:
    """The ``digits`` data set under the data-set contract: 1437 + 360 images, C = 10."""
    train, test = load_digits_split()
    return train.arrays(), test.arrays(), train.num_classes
