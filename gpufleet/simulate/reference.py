"""The reference files and Slurm allocations a simulated fleet comes with.

ref/users.csv (with addresses), ref/teams.csv (each team's lead), ref/hosts.csv and
ref/prices.csv from the scenario's rows, a marker that
says `simulate` wrote them (it refuses to overwrite real ones), and the Slurm side: one
allocations export per local day, raw/allocations/slurm-<date>.csv (`slurm="csv"`), or
the saved `sacct --json` and `squeue --json` output that `gpufleet import slurm` reads,
slurm/sacct.json and slurm/squeue.json (`slurm="json"`, see `slurm.py`). With MIG devices
and `slurm="csv"`, their jobs' rows, which name the devices, are in
raw/allocations/mig-<date>.csv (Slurm's own output names no MIG device: with "json" the
devices' processes attribute them).
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import os
import zoneinfo
from collections.abc import Iterable, Sequence
from pathlib import Path

from gpufleet.errors import GpufleetError
from gpufleet.simulate.jobs import AllocationRow
from gpufleet.simulate.scenario import Scenario
from gpufleet.simulate.slurm import write_slurm_outputs
from gpufleet.simulate.spec import SimulationSpec

USERS_HEADER = ("user", "team", "email")
TEAMS_HEADER = ("team", "lead_email", "cc")
MAIL_DOMAIN = "example.org"  # reserved for examples (RFC 2606): no real mailbox
EVERY_NTH_WITHOUT_ADDRESS = 4  # these users' idle notices go to their team's lead
HOSTS_HEADER = ("host_glob", "team")
PRICES_HEADER = ("gpu_glob", "usd_per_gpu_hour")
ALLOCATIONS_HEADER = ("job_id", "user", "team", "host", "gpu_index", "start_ts", "end_ts")
SIMULATED_MARKER = ".simulated"  # in ref/: these reference files are simulate's own
SLURM_OUTPUTS = ("csv", "json")  # allocation CSVs, or saved sacct/squeue JSON


def check_reference_files_are_simulated(data_dir: Path) -> None:
    """Refuse to overwrite reference files that `simulate` did not write (real ones)."""
    ref_dir = data_dir / "ref"
    if (ref_dir / SIMULATED_MARKER).exists():
        return
    for name in ("users.csv", "teams.csv", "hosts.csv", "prices.csv"):
        if (ref_dir / name).exists():
            raise GpufleetError(
                f"{ref_dir / name}: exists and was not written by 'gpufleet simulate'; "
                "refusing to overwrite real reference data (simulate into another --data-dir)"
            )


def write_reference_files(
    scenario: Scenario, spec: SimulationSpec, data_dir: Path, *, slurm: str = "csv"
) -> list[Path]:
    """ref/users.csv (with addresses, some left out), ref/teams.csv (each team's lead),
    ref/hosts.csv, ref/prices.csv, and raw/allocations/slurm-<date>.csv (`slurm="csv"`)
    and the MIG devices' jobs in raw/allocations/mig-<date>.csv, or slurm/sacct.json and
    slurm/squeue.json (`slurm="json"`)."""
    if slurm not in SLURM_OUTPUTS:
        raise ValueError(f"slurm must be one of {', '.join(SLURM_OUTPUTS)}, got {slurm!r}")
    ref_dir = data_dir / "ref"
    check_reference_files_are_simulated(data_dir)
    ref_dir.mkdir(parents=True, exist_ok=True)
    (ref_dir / SIMULATED_MARKER).touch()
    written = [
        _write_csv(
            ref_dir / "users.csv",
            USERS_HEADER,
            [
                (user, team, "" if n % EVERY_NTH_WITHOUT_ADDRESS == 3 else f"{user}@{MAIL_DOMAIN}")
                for n, (user, team) in enumerate(scenario.users)
            ],
        ),
        _write_csv(
            ref_dir / "teams.csv",
            TEAMS_HEADER,
            [
                (team, f"{team}-lead@{MAIL_DOMAIN}", "")
                for team in dict.fromkeys(team for _, team in scenario.users)
            ],
        ),
        _write_csv(ref_dir / "hosts.csv", HOSTS_HEADER, scenario.host_rules),
        _write_csv(
            ref_dir / "prices.csv",
            PRICES_HEADER,
            [(glob, f"{usd:.2f}") for glob, usd in scenario.prices],
        ),
    ]
    if slurm == "json":
        return written + write_slurm_outputs(scenario.jobs, scenario.users, scenario.span, data_dir)
    tz = zoneinfo.ZoneInfo(spec.timezone)

    def stamp(epoch_s: int | None) -> str:
        return "" if epoch_s is None else dt.datetime.fromtimestamp(epoch_s, tz).isoformat()

    def row(a: AllocationRow) -> tuple[str, ...]:
        return (
            a.job_id,
            a.user,
            a.team,
            a.host,
            str(a.gpu_index),
            stamp(a.start_s),
            stamp(a.end_s),
        )

    # One export per local day, holding the allocations that started that day (the
    # first also those already running when the span began); the jobs on MIG devices, each
    # naming its device (gpu_uuid), as a Kubernetes export would, in a file of their own.
    allocations_dir = data_dir / "raw" / "allocations"
    first_day = dt.datetime.fromtimestamp(spec.start_s, tz).date().isoformat()
    mig = [a for a in scenario.allocations if a.gpu_uuid]
    if mig:
        written.append(
            _write_csv(
                allocations_dir / f"mig-{first_day}.csv",
                (*ALLOCATIONS_HEADER, "gpu_uuid"),
                [(*row(a), a.gpu_uuid) for a in mig],
            )
        )
    by_day: dict[str, list[tuple[str, ...]]] = {}
    for a in scenario.allocations:
        if a.gpu_uuid:
            continue
        day = max(first_day, dt.datetime.fromtimestamp(a.start_s, tz).date().isoformat())
        by_day.setdefault(day, []).append(row(a))
    for day, rows in sorted(by_day.items()):
        written.append(_write_csv(allocations_dir / f"slurm-{day}.csv", ALLOCATIONS_HEADER, rows))
    return written


def _write_csv(path: Path, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(buffer.getvalue(), encoding="utf-8")
    os.replace(temporary, path)
    return path
