"""Command line of the channel report: ``python -m channel --out DIR [options]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from channel.cell import CellConfig
from channel.pathloss import PATHLOSS_MODELS
from channel.report import BITS_PER_PARAM, PAPER_CIFAR10_CNN_PARAMS, format_summary, run_report


def build_parser() -> argparse.ArgumentParser:
    """Argument parser; defaults are the paper's Table I with its CIFAR-10 CNN."""
    defaults = CellConfig()
    parser = argparse.ArgumentParser(
        prog="python -m channel",
        description=(
            "Simulate the UMi-Street Canyon uplink of a FedCGD cell and report device "
            "availability, feasibility and minimum bandwidths; writes summary.json and "
            "channel.png to --out."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--num-devices", type=int, default=defaults.num_devices)
    parser.add_argument("--availability-prob", type=float, default=defaults.availability_prob)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--model-bits", type=int, help="uploaded model size in bits")
    size.add_argument(
        "--model-params",
        type=int,
        default=PAPER_CIFAR10_CNN_PARAMS,
        help=f"model parameters, uploaded as {BITS_PER_PARAM} bit each "
        f"(default: the paper's CIFAR-10 CNN, {PAPER_CIFAR10_CNN_PARAMS:,})",
    )
    parser.add_argument("--deadline-s", type=float, default=defaults.deadline_s)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--pathloss-model", choices=PATHLOSS_MODELS, default=defaults.pathloss_model
    )
    parser.add_argument("--total-bandwidth-hz", type=float, default=defaults.total_bandwidth_hz)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the report and print its summary; a bad value exits with an argparse error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.model_bits is None and args.model_params < 1:
        parser.error(f"--model-params must be an integer >= 1, got {args.model_params}")
    if args.model_bits is not None and args.model_bits < 1:
        parser.error(f"--model-bits must be an integer >= 1, got {args.model_bits}")
    model_bits = (
        args.model_bits if args.model_bits is not None else args.model_params * BITS_PER_PARAM
    )
    try:
        # The options named after a CellConfig field (the others set the model size, rounds,
        # seed and output folder).
        names = {f.name for f in fields(CellConfig)}
        config = CellConfig(**{k: v for k, v in vars(args).items() if k in names})
        summary = run_report(config, model_bits, args.rounds, args.seed, args.out)
    except ValueError as error:
        parser.error(str(error))
    print(format_summary(summary))
    print(f"wrote {args.out / 'summary.json'} and {args.out / 'channel.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
