"""`gpufleet simulate` and `gpufleet demo`: a simulated fleet, alone or run through the
whole pipeline."""

from __future__ import annotations

import argparse

from gpufleet.cli.common import iso_date, iso_week, positive_float, positive_int, progress
from gpufleet.config import Config


def add_simulate(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "simulate",
        help="write a simulated fleet's sample files and matching ref/allocation files",
        description=(
            "Write a realistic simulated fleet into the data directory, laid out as "
            "collectors and schedulers write it: training jobs, idle notebooks holding "
            "memory, team-owned hosts, spare GPUs, a throttling hot rack, a data gap and a "
            "driver reload."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet simulate --data-dir /tmp/fleet\n"
            "  gpufleet simulate --gpus 16 --week 2026-W47 --slurm json\n"
            "  gpufleet simulate --gpus 32 --mig"
        ),
    )
    parser.add_argument(
        "--gpus", type=positive_int, default=128, help="number of GPUs (default: 128)"
    )
    parser.add_argument(
        "--gpus-per-host", type=positive_int, default=8, help="GPUs per host (default: 8)"
    )
    parser.add_argument(
        "--week",
        type=iso_week,
        metavar="YYYY-Www",
        help="ISO week to simulate (default: the last complete week)",
    )
    parser.add_argument(
        "--start",
        type=iso_date,
        metavar="YYYY-MM-DD",
        help="first day to simulate (overrides --week)",
    )
    parser.add_argument(
        "--days", type=positive_int, default=7, help="days to simulate (default: 7)"
    )
    parser.add_argument(
        "--interval",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="collector interval (default: 10)",
    )
    parser.add_argument(
        "--flush",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="collector flush period, i.e. seconds per file (default: 600)",
    )
    parser.add_argument("--seed", type=int, default=7, help="random seed (default: 7)")
    parser.add_argument(
        "--slurm",
        choices=("csv", "json"),
        default="csv",
        help="the Slurm side: 'csv' writes allocation files under raw/allocations; 'json' "
        "writes the saved output of sacct --json and squeue --json (taken at the end of "
        "the span) to slurm/sacct.json and slurm/squeue.json, for 'gpufleet import slurm "
        "--sacct-json ... --squeue-json ...' (default: csv)",
    )
    parser.add_argument(
        "--mig",
        action="store_true",
        help="split some spare H100 GPUs into MIG devices (3g.40gb + 4g.40gb, or seven "
        "1g.10gb), each running a user's process",
    )
    parser.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.simulate.fleet import SimulationSpec, simulate_fleet

    spec = SimulationSpec.from_cli(
        config=config,
        gpus=args.gpus,
        gpus_per_host=args.gpus_per_host,
        week=args.week,
        start=args.start,
        days=args.days,
        interval_s=args.interval,
        flush_s=args.flush,
        seed=args.seed,
        mig=args.mig,
    )
    print(simulate_fleet(spec, data_dir=config.data_dir, progress=progress, slurm=args.slurm))
    return 0


def add_demo(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "demo",
        help="simulate a fleet week, import its Slurm jobs, ingest, build and report, and "
        "print where the report is",
        epilog="examples:\n  gpufleet demo\n  gpufleet demo --gpus 32 --data-dir /tmp/demo",
    )
    parser.add_argument(
        "--gpus", type=positive_int, default=128, help="number of simulated GPUs (default: 128)"
    )
    parser.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace, config: Config) -> int:
    from gpufleet import demo

    return demo.run_demo(config, gpus=args.gpus, progress=progress)
