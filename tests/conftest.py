"""What every test shares: the environment the Makefile gives ``make test``, and the order.

``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1`` stops a SuperLink from installing the app's
dependencies for each run (several GB, another torch); set here too, so a plain ``pytest``
behaves as ``make test`` does. Shared run configs are in ``task_settings.py``, shared result
readers and the uninterrupted reference run in ``run_results.py``, process helpers in
``subprocesses.py``.

The longest tests start first (:data:`LONGEST_FIRST`): with two workers handed one test at a
time (``--maxschedchunk 1`` in pyproject.toml) the short tests fill the gaps, and no long test
starts near the end to set the suite's time alone. A test missing from the list runs in
collection order: a stale list costs time, never a check.
"""

from __future__ import annotations

import os

import pytest

#: Tests of 20 s or more on two busy cores (two ``--durations`` listings), longest first:
#: ``file::function``, every parametrization of it. None shares a module-scoped fixture with a
#: test left behind (test_clean_stops's serves that one test alone), so none is set up twice.
LONGEST_FIRST = (
    "test_deployment.py::test_tls_with_supernode_authentication_on_a_given_superlink",
    "test_kill9.py::test_a_killed_comparison_leaves_no_run_alive_and_runs_again_exactly",
    "test_flwr_run.py::test_flwr_run_simulation_learns_writes_results_and_equals_inprocess",
    "test_dp_aggregators.py::test_readme_dp_measurement_command_runs",
    "test_readme_tools.py::test_readme_tool_command_runs",
    "test_channel_trace.py::test_a_trace_through_the_launcher_gives_the_simulated_schedules",
    "test_extension_points.py::test_all_four_run_in_process_named_in_the_run_config_alone",
    "test_aggregators.py::test_readme_attack_sweep_command_runs",
    "test_aggregators.py::test_readme_inprocess_aggregator_commands_run",
    "test_clean_stops.py::test_a_signal_inside_a_write_stops_the_run_cleanly",
    "test_kill9.py::test_a_killed_in_process_run_with_default_settings_resumes_exactly",
    "test_resume_command.py::test_a_stopped_inprocess_run_prints_the_command_that_finishes_it_exactly",
    "test_readme_commands.py::test_readme_reproduce_command_runs",
    "test_deployment.py::test_too_few_supernodes_fail_after_the_timeout",
    "test_paths.py::test_a_preset_with_side_by_side_runs_in_a_hostile_folder_completes",
    "test_decision_check.py::test_the_all_reference_is_exempt_from_the_budget_only",
    "test_fscd_incremental.py::test_stages_equal_dense_on_random_instances",
    "test_readme_commands.py::test_readme_compare_command_runs",
    "test_own_data_model.py::test_files_by_absolute_path_or_a_package_run_in_process_and_auto_sizes_the_mlp",
    "test_resume_command.py::test_a_run_stopped_before_its_first_checkpoint_says_so_and_how_to_start_again",
    "test_folder_locks.py::test_a_second_command_into_a_live_runs_folder_is_refused_naming_its_pid",
    "test_folder_locks.py::test_two_runs_started_together_into_one_folder_one_is_refused_naming_the_other",
    "test_resume.py::test_killed_and_resumed_run_equals_the_uninterrupted_run",
    "test_processes.py::test_a_refused_launch_is_one_line_and_creates_nothing",
    "test_run_pool.py::test_a_failed_run_side_by_side_is_named_and_the_exit_code_is_one",
    "test_readme_commands.py::test_make_run_on_cifar_without_the_data_stops_in_one_line",
    "test_deployment_files.py::test_every_flag_exists_in_the_installed_flower",
    "test_own_policy.py::test_a_bad_policy_setting_fails_before_start_in_one_line",
)


def pytest_configure(config: pytest.Config) -> None:
    os.environ["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the tests of :data:`LONGEST_FIRST` first, in its order; the rest keep theirs."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item: pytest.Item) -> int:
        name = getattr(item, "originalname", item.name)
        return rank.get(f"{item.path.name}::{name}", len(rank))

    items.sort(key=place)
