"""The incremental FSCD takes exactly the decisions of the dense FSCD it replaced (the oracle)."""

import numpy as np
import pytest
import reference_solvers as reference

from channel import Cell, CellConfig
from channel.report import PAPER_CIFAR10_MODEL_BITS as MODEL_BITS
from fedcgd_strategy import SchedulingProblem, solve
from fedcgd_strategy.solvers import heuristics as fscd
from fedcgd_strategy.solvers import transit_search


def random_instance(
    rng: np.random.Generator, num_devices: int, num_classes: int | None = None
) -> SchedulingProblem:
    """A P1 instance from a wide family, with ties of every kind made likely.

    Labels: Dirichlet with alpha from 0.01 (nearly one-hot) to 10, sometimes exactly one-hot,
    sometimes with duplicated devices; C from 1 to 12. B*: all equal, a few discrete values, or
    continuous, with up to 30 % infeasible (inf). Budget from very tight to loose. Batch sizes
    uniform or mixed; G scalar or per class; sigma / (sqrt(b) G) from 0.01 to 100 (or sigma = 0).
    """
    if num_classes is None:
        num_classes = int(rng.integers(1, 13))
    alpha = float(rng.choice([0.01, 0.1, 1.0, 10.0]))
    labels = rng.dirichlet(np.full(num_classes, alpha), size=num_devices)
    if rng.random() < 0.15:
        labels = np.eye(num_classes)[rng.integers(0, num_classes, num_devices)]
    if rng.random() < 0.3:
        copies = rng.integers(0, num_devices, num_devices // 2)
        labels[rng.integers(0, num_devices, copies.size)] = labels[copies]
    labels = labels / labels.sum(axis=1, keepdims=True)
    target = np.full(num_classes, 1.0 / num_classes)
    if rng.random() >= 0.7:
        target = rng.dirichlet(np.full(num_classes, 5.0))

    mode = rng.integers(0, 3)
    if mode == 0:
        bandwidth = np.full(num_devices, 1e6)
    elif mode == 1:
        bandwidth = rng.choice([0.5e6, 1e6, 2e6], num_devices)
    else:
        bandwidth = rng.lognormal(np.log(1e6), 1.0, num_devices)
    bandwidth[rng.random(num_devices) < rng.choice([0.0, 0.1, 0.3])] = np.inf
    finite = bandwidth[np.isfinite(bandwidth)]
    total_hz = float(rng.choice([0.05, 0.2, 0.5, 1.2])) * max(float(finite.sum()), 1e6)

    batch: int | np.ndarray = 32
    if rng.random() < 0.3:
        batch = rng.choice([8, 16, 32, 64], num_devices)
    gradient: float | np.ndarray = float(10 ** rng.uniform(-1, 1))
    if rng.random() < 0.5:
        gradient = rng.uniform(0.0, 3.0, num_classes)
    ratio = float(10 ** rng.uniform(-2, 2))
    sigma = 0.0 if rng.random() < 0.05 else ratio * np.sqrt(32) * float(np.mean(gradient))
    return SchedulingProblem(labels, target, bandwidth, total_hz, sigma, gradient, batch)


def cell_instance(rng: np.random.Generator, num_devices: int, ratio: float) -> SchedulingProblem:
    """The paper's Table I setting: UMi channel at 20 MHz, CIFAR-10 CNN, Dirichlet(0.1) labels."""
    target = np.full(10, 0.1)
    labels = rng.dirichlet(0.1 * target, size=num_devices)
    labels = labels / labels.sum(axis=1, keepdims=True)
    cell = Cell(CellConfig(num_devices=num_devices, availability_prob=1.0), rng)
    need = np.asarray(cell.draw_round(MODEL_BITS).min_bandwidth_hz, dtype=float)
    budget = CellConfig().total_bandwidth_hz
    return SchedulingProblem(labels, target, need, budget, ratio * np.sqrt(32), 1.0, 32)


#: Settings of the incremental search that force each of its code paths: the defaults (small
#: grids evaluated whole, as the dense search does), every fitting transit evaluated directly,
#: the bound with early tightening and one-pass masking, and the bound without tightening and
#: with row-by-row masking.
BOUND = {"DENSE_GRID": 0, "EVALUATE_ALL": 0}
PATHS: dict[str, dict[str, int]] = {
    "default": {},
    "direct": {"DENSE_GRID": 0},
    "bound, tighten, putmask": {**BOUND, "EVALUATE_FIRST": 4, "MASK_BY_LOOP": 0},
    "bound, loop mask": {**BOUND, "EVALUATE_FIRST": 10**9, "MASK_BY_LOOP": 10**9},
}


def assert_same_stages(
    problem: SchedulingProblem, label: str, monkeypatch: pytest.MonkeyPatch | None = None
) -> None:
    old = reference.fscd_dense_stages(problem)
    for path, settings in PATHS.items() if monkeypatch is not None else [("default", {})]:
        if monkeypatch is not None:
            monkeypatch.undo()
            for name, value in settings.items():
                monkeypatch.setattr(transit_search, name, value)
        new = fscd.fscd_stages(problem)
        where = f"{label} ({path})"
        assert [s.size for s in new] == [s.size for s in old], where
        for a, b in zip(new, old, strict=True):
            np.testing.assert_array_equal(a.start, b.start, err_msg=where)
            np.testing.assert_array_equal(a.selected, b.selected, err_msg=where)
            assert a.swaps == b.swaps, where
            assert a.objective == pytest.approx(b.objective, rel=1e-12, abs=0.0), where
    if monkeypatch is not None:
        monkeypatch.undo()


def test_stages_equal_dense_on_random_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(20240611)
    sizes = [int(v) for v in rng.integers(2, 40, 80)] + [int(v) for v in rng.integers(40, 90, 8)]
    for index, num_devices in enumerate(sizes):
        problem = random_instance(rng, num_devices)
        assert_same_stages(problem, f"instance {index}, V={num_devices}", monkeypatch)
    rng = np.random.default_rng(77)
    for index, num_devices in enumerate((120, 160)):  # larger instances
        problem = random_instance(rng, num_devices, num_classes=10)
        assert_same_stages(problem, f"large {index}", monkeypatch)


@pytest.mark.parametrize("ratio", [0.1, 1.0, 10.0])
def test_schedule_equals_dense_in_the_paper_cell(ratio: float) -> None:
    rng = np.random.default_rng([5, int(ratio * 10)])
    for num_devices in (40, 150):
        problem = cell_instance(rng, num_devices, ratio)
        assert_same_stages(problem, f"cell V={num_devices}")
        new = solve(problem, "fscd")
        old = reference.fscd_dense(problem)
        np.testing.assert_array_equal(new.selected, old.selected)
        assert new.iterations == old.iterations
        assert new.objective == pytest.approx(old.objective, rel=1e-12)
        assert new.method == "fscd" and problem.is_feasible(new.selected)


@pytest.mark.parametrize("path", ["default", "bound, tighten, putmask"])
def test_swap_search_equals_dense_from_random_starts(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in PATHS[path].items():
        monkeypatch.setattr(transit_search, name, value)
    rng = np.random.default_rng(31)
    checked = 0
    while checked < 100:
        problem = random_instance(rng, int(rng.integers(2, 60)))
        candidates = np.flatnonzero(problem.feasible)
        if candidates.size == 0:
            continue
        mask = np.zeros(problem.num_devices, dtype=bool)
        size = int(rng.integers(1, candidates.size + 1))
        mask[rng.choice(candidates, size, replace=False)] = True
        while mask.sum() > 1 and not problem.is_feasible(mask):
            mask[rng.choice(np.flatnonzero(mask))] = False
        if not problem.is_feasible(mask):
            continue
        new_mask, new_objective, new_swaps = fscd.swap_search(problem, mask)
        old_mask, old_objective, old_swaps = reference.swap_search_dense(problem, mask)
        np.testing.assert_array_equal(new_mask, old_mask)
        assert new_swaps == old_swaps
        assert new_objective == pytest.approx(old_objective, rel=1e-12, abs=0.0)
        checked += 1


def test_exact_ties_go_to_the_lowest_devices_and_edge_cases() -> None:
    # Four identical devices and four identical others: every transit ties with the others.
    labels = np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4)
    problem = SchedulingProblem(labels, np.array([0.5, 0.5]), np.ones(8), 4.0, 0.01)
    start = np.array([True, True, True, True, False, False, False, False])
    selected, _, swaps = fscd.swap_search(problem, start)
    # W = 1 for all of class 0; swapping v = 0 for u = 4 (lowest both) gives W = 0.5, then
    # v = 1 for u = 5 gives W = 0.
    np.testing.assert_array_equal(selected, [False, False, True, True, True, True, False, False])
    assert swaps == 2
    assert_same_stages(problem, "ties")
    # edge cases: one class, sigma = 0
    one_class = SchedulingProblem(np.ones((5, 1)), np.ones(1), np.arange(1.0, 6.0), 7.0, 1.0)
    assert_same_stages(one_class, "C = 1")
    no_sigma = SchedulingProblem(
        np.array([[0.5, 0.5], [0.9, 0.1], [0.1, 0.9]]), np.array([0.5, 0.5]), np.ones(3), 3.0, 0.0
    )
    assert_same_stages(no_sigma, "sigma = 0")
    assert fscd.fscd_stages(no_sigma)[0].objective == 0.0


def test_fit_counts_match_the_elementwise_budget_test() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        size = int(rng.integers(0, 30))
        values = np.sort(rng.choice([0.1, 0.2, 0.3, 1 / 3, 0.7, 1.1], size))
        if rng.random() < 0.5:
            values = np.sort(rng.uniform(0, 1, size))
        room = rng.choice([0.0, 0.1, 0.2, 0.3, 0.7, 1 - 1 / 3], 8) + rng.choice([0.0, 1e-17], 8)
        limit = float(rng.choice([0.4, 1.0, 2 / 3 + 1e-16, 0.5]))
        expected = (room[:, None] + values[None, :] <= limit).sum(axis=1)
        np.testing.assert_array_equal(transit_search.fit_counts(room, values, limit), expected)


@pytest.mark.slow
@pytest.mark.parametrize("ratio", [0.1, 1.0])
def test_stages_equal_dense_at_a_thousand_devices(ratio: float) -> None:
    # The size of `fedcgd bench fscd-scale`: the row and column prefilter, the bound and the
    # direct evaluation all take part, over hundreds of transits per schedule.
    rng = np.random.default_rng([1000, int(ratio * 10)])
    for index in range(2):
        assert_same_stages(cell_instance(rng, 1000, ratio), f"cell V=1000 #{index}")
