"""Units, LOS probability and path loss of the channel package, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from subprocesses import assert_import_pulls_neither_flwr_nor_torch

import channel
from channel.pathloss import breakpoint_distance_m, pathloss_umi_los_pl1_db, pathloss_umi_los_pl2_db

FC_HZ = 3.5e9


def test_import_pulls_neither_flwr_nor_torch() -> None:
    assert_import_pulls_neither_flwr_nor_torch(
        "channel", "channel.report", "channel.cell", "channel.bandwidth"
    )


def test_unit_conversions_by_hand() -> None:
    # 23 dBm = 10^((23 - 30)/10) W = 10^-0.7 W = 0.19952623149688797 W
    assert float(channel.dbm_to_w(23.0)) == pytest.approx(0.19952623149688797, rel=1e-12)
    assert float(channel.dbm_to_w(30.0)) == pytest.approx(1.0, rel=1e-12)
    # -174 dBm/Hz + 6 dB noise figure: 10^((-174 + 6 - 30)/10) = 10^-19.8 = 1.5848931924611108e-20
    assert float(channel.dbm_to_w(-174.0 + 6.0)) == pytest.approx(1.5848931924611108e-20, rel=1e-12)
    assert float(channel.db_to_linear(20.0)) == pytest.approx(100.0)


def test_los_probability_by_hand() -> None:
    # d <= 18 m: 1.  d = 36 m: 18/36 + exp(-36/36) (1 - 18/36) = 0.5 + 0.5/e = 0.6839397205857212
    # d = 100 m: 0.18 + exp(-100/36) * 0.82 = 0.23098474969813537
    d2d_m = np.array([0.0, 5.0, 18.0, 36.0, 100.0])
    expected = np.array([1.0, 1.0, 1.0, 0.6839397205857212, 0.23098474969813537])
    np.testing.assert_allclose(channel.los_probability(d2d_m), expected, rtol=1e-12)


def test_los_probability_range_monotone_and_continuous_at_18_m() -> None:
    d2d_m = np.linspace(0.0, 5000.0, 20001)
    probability = channel.los_probability(d2d_m)
    assert np.all((probability >= 0.0) & (probability <= 1.0))
    assert np.all(np.diff(probability) <= 0.0)
    assert np.all(probability[d2d_m <= 18.0] == 1.0)
    just_above = float(channel.los_probability(18.0 + 1e-9))
    assert just_above == pytest.approx(1.0, abs=1e-9)
    assert just_above < 1.0
    # The paper's printed bracket would give 18/20 + exp(-(20/36)(1 - 18/20)) = 1.846 > 1 at 20 m.
    assert float(channel.los_probability(20.0)) < 1.0


# At 100 m: d3D = sqrt(100^2 + (10 - 1.5)^2) = 100.36059983878135 m, log10(d3D) =
# 2.001563248356944, log10(3.5) = 0.5440680443502757. PL1 = 32.4 + 21 log d3D + 20 log fc =
# 85.31418910250133 dB; paper NLOS = 32.4 + 20 log fc + 31.9 log d3D = 107.13122850959202;
# PL'_NLOS = 35.3 log d3D + 22.4 + 21.3 log fc - 0.3 * 0 = 104.64383201166098 dB, and tr38901
# NLOS = max(PL1, PL') = PL'. At 240 m > d'_BP = 210 m: d3D = 240.15047366182728, log10 =
# 2.380483447558429; PL2 = 32.4 + 40 log d3D + 20 log fc - 9.5 log10(210^2 + 8.5^2 = 44172.25)
# [= 4.645149521461176] = 94.37177833546149 dB; the paper model has no breakpoint: PL1 = 32.4 +
# 21 * 2.380483447558429 + 10.8814 = 93.27151328573251; PL' = 35.3 * 2.380483447558429 + 22.4 +
# 21.3 * 0.5440680443502757 = 118.01971504347338.
@pytest.mark.parametrize(
    ("d2d_m", "los", "model", "expected_db"),
    [
        (100.0, True, "paper", 85.31418910250133),
        (100.0, False, "paper", 107.13122850959202),
        (100.0, True, "tr38901", 85.31418910250133),
        (100.0, False, "tr38901", 104.64383201166098),
        (240.0, True, "tr38901", 94.37177833546149),
        (240.0, True, "paper", 93.27151328573251),
        (240.0, False, "tr38901", 118.01971504347338),
    ],
)
def test_pathloss_by_hand(d2d_m: float, los: bool, model: str, expected_db: float) -> None:
    assert float(channel.pathloss_db(d2d_m, los, model=model)) == pytest.approx(
        expected_db, abs=1e-9
    )


def test_los_pathloss_continuous_at_breakpoint() -> None:
    # At d2D = d'_BP, d3D^2 = d'_BP^2 + dh^2, so
    # PL2 - PL1 = 40 log d3D - 9.5 * 2 log d3D - 21 log d3D = 0.
    d_bp_m = breakpoint_distance_m(10.0, 1.5, FC_HZ)
    assert d_bp_m == pytest.approx(210.0, rel=1e-12)  # 4 * (10 - 1) * (1.5 - 1) * 3.5e9 / 3e8
    d3d_m = math.hypot(d_bp_m, 8.5)
    pl1 = float(pathloss_umi_los_pl1_db(d3d_m, FC_HZ))
    pl2 = float(pathloss_umi_los_pl2_db(d3d_m, FC_HZ, 10.0, 1.5))
    assert pl1 == pytest.approx(pl2, abs=1e-9)
    below = float(channel.pathloss_db(d_bp_m - 1e-7, True, model="tr38901"))
    above = float(channel.pathloss_db(d_bp_m + 1e-7, True, model="tr38901"))
    assert above - below == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("model", ["paper", "tr38901"])
@pytest.mark.parametrize("los", [True, False])
def test_pathloss_increases_with_distance(model: str, los: bool) -> None:
    d2d_m = np.linspace(10.0, 5000.0, 5000)
    loss_db = channel.pathloss_db(d2d_m, los, model=model)
    assert np.all(np.diff(loss_db) > 0.0)


@pytest.mark.parametrize("model", ["paper", "tr38901"])
def test_nlos_never_below_los_and_broadcasting(model: str) -> None:
    d2d_m = np.linspace(10.0, 1000.0, 200)
    los_db = channel.pathloss_db(d2d_m, True, model=model)
    nlos_db = channel.pathloss_db(d2d_m, False, model=model)
    assert np.all(nlos_db >= los_db)
    mixed = channel.pathloss_db(d2d_m[:, None], np.array([True, False])[None, :], model=model)
    assert mixed.shape == (200, 2)
    np.testing.assert_array_equal(mixed[:, 0], los_db)
    np.testing.assert_array_equal(mixed[:, 1], nlos_db)


def test_pathloss_rejects_an_unknown_model() -> None:
    with pytest.raises(ValueError, match="model"):
        channel.pathloss_db(100.0, True, model="umi")
