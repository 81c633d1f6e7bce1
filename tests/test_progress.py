"""Overall progress of multi-run commands: counts, elapsed and time left by hand."""

from __future__ import annotations

from experiments.run.progress import RunProgress, format_duration


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_time_left_is_the_mean_executed_run_times_the_runs_left_per_worker() -> None:
    assert format_duration(42.4) == "42 s"  # durations read like a person writes them
    assert format_duration(185) == "3 min 05 s"
    assert format_duration(2 * 3600 + 7 * 60 + 30) == "2 h 07 min"
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
    # runs side by side: those going count, and the time left is shared by the workers
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


def test_a_resumed_writer_keeps_its_clock_but_times_only_its_own_rounds(
    monkeypatch, tmp_path
) -> None:
    import server_app.run_folder.results as results

    clock = Clock(50.0)
    monkeypatch.setattr(results.time, "perf_counter", clock)
    writer = results.ResultWriter(tmp_path / "run", 10, elapsed_s=40.0)  # 40 s before
    clock.now += 7.0
    writer.start_rounds()
    clock.now += 2.0  # round 8: 2 s, 2 left
    assert writer.progress(8, 0.5, 3, 4).endswith("| elapsed    49.0 s | ETA     4.0 s")
    clock.now += 1.0  # round 10, the last: no time left (the mean round time: test_recorder)
    assert writer.progress(10, 0.5, 3, 4).endswith("| elapsed    50.0 s | ETA     0.0 s")
