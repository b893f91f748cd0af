"""`gpufleet import`: what other systems already record (Prometheus, ...) as the contract's
files, so that ingest, the models and the reports take them like the collector's."""

from __future__ import annotations

import argparse

from gpufleet.cli.import_prometheus import add_prometheus
from gpufleet.cli.import_slurm import add_slurm


def add_import(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "import",
        help="samples and allocations from other systems (import prometheus, import slurm)",
        description=(
            "Turn another system's records into sample files (raw/samples) and allocation "
            "rows (raw/allocations); 'gpufleet ingest' then loads them."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet import prometheus --url http://prometheus:9090\n"
            "  gpufleet import slurm"
        ),
    )
    imports = parser.add_subparsers(dest="import_command", metavar="SOURCE", required=True)
    add_prometheus(imports)
    add_slurm(imports)
