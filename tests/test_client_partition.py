"""Tests of fedcgd_task.partition: imbalance subsampling, shard and Dirichlet splits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats
from task_settings import make_settings

from fedcgd_task.partition import (
    apply_imbalance,
    dirichlet_partition,
    partition_indices,
    shard_partition,
)


def balanced_labels(num_classes: int, per_class: int, seed: int = 0) -> np.ndarray:
    """Shuffled labels with exactly ``per_class`` samples of each class."""
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def assert_disjoint(parts: list[np.ndarray]) -> np.ndarray:
    joined = np.concatenate(parts)
    assert np.unique(joined).size == joined.size, "a sample was used twice"
    return joined


@pytest.mark.parametrize(
    ("classes", "per_class", "ratio", "counts"),
    [
        (10, 7, 1.0, [7] * 10),  # r = 1 keeps everything
        # r = 3: classes 0..4 keep round(100 / 3) = 33 each, 5..9 keep 100 (n1 = 165, n2 = 500)
        (10, 100, 3.0, [33] * 5 + [100] * 5),
        (4, 5, 2.0, [3, 3, 5, 5]),  # 2.5 -> 3: round half up (Python's round() gives 2)
        (5, 10, 2.0, [5, 5, 5, 10, 10]),  # C = 5: classes c < 2.5 (0, 1, 2) are subsampled
    ],
)
def test_imbalance_hand_counts(classes: int, per_class: int, ratio: float, counts: list[int]):
    labels = balanced_labels(classes, per_class)
    kept = apply_imbalance(labels, ratio, np.random.default_rng(1))
    np.testing.assert_array_equal(np.bincount(labels[kept], minlength=classes), counts)
    assert np.all(np.diff(kept) > 0)  # sorted, unique


@pytest.mark.parametrize(
    ("labels", "num_devices", "shards", "size"),
    [
        # 10 classes x 60 = 600 samples, V = 10, l = 3 -> 30 shards of 20, 60 per device.
        (balanced_labels(10, 60), 10, 3, 60),
        # N = 605, V = 6, l = 4 -> 24 shards of floor(605 / 24) = 25, 5 samples dropped.
        (np.random.default_rng(3).integers(0, 7, size=605), 6, 4, 100),
        # Degenerate l = 1 with V = C = 8 and equal classes (25 each): shards of 25.
        (balanced_labels(8, 25), 8, 1, 25),
    ],
)
def test_shards_are_equal_and_disjoint_and_drop_only_the_remainder(
    labels: np.ndarray, num_devices: int, shards: int, size: int
) -> None:
    parts = shard_partition(labels, num_devices, shards, np.random.default_rng(0))
    assert [p.size for p in parts] == [size] * num_devices
    assert assert_disjoint(parts).size == size * num_devices
    if labels.size == 600:  # shards of 20 never straddle a class (60 each): <= 3 classes
        assert all(np.unique(labels[p]).size <= 3 for p in parts)
    if shards == 1:  # every device holds exactly one class, each class goes to one device
        classes = [np.unique(labels[p]) for p in parts]
        assert all(c.size == 1 for c in classes)
        assert sorted(int(c[0]) for c in classes) == list(range(num_devices))


@pytest.mark.parametrize(("alpha", "num_devices"), [(0.1, 7), (1.0, 10), (100.0, 3)])
def test_dirichlet_equal_sizes_no_duplicates(alpha: float, num_devices: int) -> None:
    labels = balanced_labels(10, 53)  # N = 530
    parts = dirichlet_partition(labels, num_devices, alpha, np.random.default_rng(0))
    assert [p.size for p in parts] == [530 // num_devices] * num_devices
    joined = assert_disjoint(parts)
    assert joined.min() >= 0 and joined.max() < 530


def test_dirichlet_large_alpha_gives_near_global_mix_and_small_alpha_concentrates_it() -> None:
    # alpha = 1e5: p_v is within ~0.001 of p; the multinomial noise of a device's 1000 draws has
    # std sqrt(0.1 * 0.9 / 1000) = 0.0095. The first half of the devices draw from full pools,
    # so their class shares must lie within 0.05 (> 5 std) of p = 0.1.
    labels = balanced_labels(10, 1000)
    parts = dirichlet_partition(labels, 10, 1e5, np.random.default_rng(0))
    for part in parts[:5]:
        share = np.bincount(labels[part], minlength=10) / part.size
        assert np.max(np.abs(share - 0.1)) < 0.05
    # alpha = 0.01, p uniform over 10 classes: Dir(0.001, ...) is almost one-hot; device 0 draws
    # from full pools (n = 100 <= 1000 per class), so its largest class share is > 0.9 in nearly
    # every seed (P(max component < 0.9) is tiny for total concentration 0.01).
    top = []
    for seed in range(40):
        part = dirichlet_partition(labels, 100, 0.01, np.random.default_rng(seed))[0]
        top.append(np.bincount(labels[part], minlength=10).max() / part.size)
    assert np.mean(np.asarray(top) > 0.9) >= 0.9


def test_dirichlet_first_device_mix_follows_beta_and_its_mean_the_global_distribution() -> None:
    # Two classes with p = (0.25, 0.75) and alpha = 4: Dir(alpha p) = Dir(1, 3), so device 0's
    # class-0 share ~ Beta(1, 3). V = 4 gives n = 25,000 <= 25,000 class-0 samples: no capping;
    # binomial noise (std <= 0.003) is far below the KS resolution for 200 draws.
    labels = np.random.default_rng(0).permutation(np.repeat([0, 1], [25_000, 75_000]))
    shares = []
    for seed in range(200):
        part = dirichlet_partition(labels, 4, 4.0, np.random.default_rng(seed))[0]
        shares.append(np.mean(labels[part] == 0))
    result = stats.kstest(shares, stats.beta(1, 3).cdf)
    assert result.pvalue > 1e-3
    # E[p_v] = p for any alpha: device 0's mean class share over seeds must match p = counts / N.
    counts = np.array([500, 1000, 1500, 2000])
    labels = np.random.default_rng(1).permutation(np.repeat(np.arange(4), counts))
    p = counts / counts.sum()
    shares = []
    for seed in range(300):
        part = dirichlet_partition(labels, 10, 1.0, np.random.default_rng(seed))[0]
        shares.append(np.bincount(labels[part], minlength=4) / part.size)
    mean = np.mean(shares, axis=0)
    # Var of a Dir(p) component = p(1-p)/2; std of the mean over 300 seeds <= sqrt(0.25/2/300)
    # = 0.02; allow 4 std.
    assert np.max(np.abs(mean - p)) < 0.08


SETTINGS = make_settings(seed=4, num_devices=10, partition="shards")


@pytest.mark.parametrize("partition", ["shards", "dirichlet"])
def test_partition_indices_deterministic_by_seed(partition: str) -> None:
    labels = balanced_labels(10, 80)
    settings = dataclasses.replace(SETTINGS, partition=partition)
    a = partition_indices(settings, labels)
    b = partition_indices(make_settings(seed=4, num_devices=10, partition=partition), labels)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    c = partition_indices(dataclasses.replace(settings, seed=5), labels)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_partition_indices_apply_the_imbalance_then_shards_or_dirichlet_or_refuse() -> None:
    # 10 classes x 300, r = 3: first half keeps 100 each -> 500 + 1500 = 2000 samples,
    # V = 10, l = 4 -> 40 shards of 50, every kept sample used once; n2 / n1 = 3 exactly.
    labels = balanced_labels(10, 300)
    settings = dataclasses.replace(SETTINGS, imbalance_ratio=3.0, shards_per_device=4)
    joined = assert_disjoint(partition_indices(settings, labels))
    assert joined.size == 2000
    y = labels[joined]
    assert np.sum(y >= 5) / np.sum(y < 5) == 3.0
    # Dirichlet, r = 9 on 10 x 100: kept 5 * round(100 / 9) = 5 * 11 = 55 plus 500 -> 555
    # samples, 55 per device; its rows map back to the original ones.
    labels = balanced_labels(10, 100)
    settings = dataclasses.replace(SETTINGS, partition="dirichlet", imbalance_ratio=9.0)
    parts = partition_indices(settings, labels)
    assert [p.size for p in parts] == [55] * 10
    y = labels[assert_disjoint(parts)]
    assert np.sum(y < 5) <= 55  # only the kept first-half samples can appear
    # too few samples for the devices' shards: refused naming the key
    settings = dataclasses.replace(SETTINGS, shards_per_device=4)
    with pytest.raises(ValueError, match=r"'num-devices' = 10 \(x 4 shards\) exceeds the 30"):
        partition_indices(settings, balanced_labels(3, 10))
