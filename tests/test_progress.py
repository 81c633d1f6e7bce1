"""Overall progress of multi-run commands: counts, elapsed and time left by hand."""

from __future__ import annotations

from experiments.progress import RunProgress, format_duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_like_a_person_writes_them() -> None:
    assert format_duration(42.4) == "42 s"
    assert format_duration(185) == "3 min 05 s"
    assert format_duration(2 * 3600 + 7 * 60 + 30) == "2 h 07 min"


def test_time_left_is_the_mean_executed_run_times_the_runs_left() -> None:
    clock = Clock()
    progress = RunProgress(total=5, clock=clock)
    assert progress.header() == "[run 1/5 | 0 done | 0 s elapsed | time left unknown]"
    progress.end_run(kept=True)  # kept runs cost nothing and do not enter the estimate
    progress.start_run()
    clock.now += 30.0
    progress.end_run()
    progress.start_run()
    clock.now += 90.0
    progress.end_run(failed=True)
    # 3 of 5 done; mean executed run (30 + 90) / 2 = 60 s; 2 left -> 120 s
    assert progress.seconds_left() == 120.0
    assert progress.header() == (
        "[run 4/5 | 1 done, 1 kept, 1 failed | 2 min 00 s elapsed | ~2 min 00 s left]"
    )


def test_round_eta_leaves_the_start_up_out() -> None:
    from server_app.results import eta_s

    # Round 1 printed at 20 s (Ray start-up), round 5 at 22 s: 0.5 s per round, 45 left.
    assert eta_s((1, 20.0), (5, 22.0), 50) == 22.5
    # At the first printed round itself only its own time is known: 20 s per round.
    assert eta_s((1, 20.0), (1, 20.0), 3) == 40.0
    # A resumed run whose first printed round is 7.
    assert eta_s((7, 3.0), (9, 4.0), 10) == 0.5
    assert eta_s((1, 1.0), (10, 5.0), 10) == 0.0


def test_runs_side_by_side_share_the_time_left_and_count_the_runs_going() -> None:
    clock = Clock()
    progress = RunProgress(total=6, clock=clock, workers=2)
    progress.start_run("a")
    assert progress.header().startswith("[run 2/6 | 0 done")  # "a" is going: the next is 2
    progress.start_run("b")
    clock.now += 40.0
    progress.end_run("b")
    clock.now += 20.0
    progress.end_run("a")
    # runs of 40 s and 60 s: mean 50 s; 4 left on 2 workers -> 100 s
    assert progress.seconds_left() == 100.0
    assert progress.header() == "[run 3/6 | 2 done | 1 min 00 s elapsed | ~1 min 40 s left]"
