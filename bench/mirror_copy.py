"""What the pipeline host's copy of an S3 `raw_location` costs: a simulated fleet's day
uploaded to a real store (SeaweedFS, tests/s3_stack.py, on this machine), then copied into
an empty data directory by `mirror_raw_location`, as an ingest does first. The copy of a
backfill's whole host-days is the part a Dask ingest could skip (docs/dask.md, reading from
the store).

    python -m bench.mirror_copy --gpus 256
    python -m bench.mirror_copy --gpus 256 --ingest   # the whole ingest, on local:2

Prints the objects, their bytes, the copy's wall time and this process's CPU time (the
store's own CPU is not counted: on a machine shared with it, the wall time is stretched).

With --ingest it times instead the whole ingest of that day with `[compute] dask =
"local:2"` (a temporary Prefect server started first, not timed): this process's (the
pipeline host's) wall and CPU time, the step that copies and lists the files, and how many
objects the pipeline host downloaded (the record's lines with an ETag; since 2026-11-30 a
Dask ingest leaves a backfill's whole host-days in the store: `gpufleet/integrations/
pending.py`). The same script times an older checkout for a before and after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpufleet.config import ComputeConfig, Config, S3Config
from gpufleet.integrations.mirror import RECORD_NAME, mirror_raw_location
from gpufleet.simulate.fleet import (
    SimulationSpec,
    scenario_for,
    simulate_window,
    write_reference_files,
)
from gpufleet.storage.s3 import S3Location, s3_filesystem
from tests.s3_stack import BUCKET, s3_store

START = dt.datetime(2026, 10, 5, tzinfo=dt.UTC)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _ingest(config: Config, objects: int) -> str:
    """The day's ingest on `local:2`: this process's wall and CPU time, and what it copied."""
    from prefect import flow

    from bench.dask_build import _prefect_server, _stop_forkserver
    from gpufleet.flows.compact import dask_compact_fan_out, dask_load_fan_out
    from gpufleet.flows.dask_cluster import DaskCluster
    from gpufleet.warehouse.ingest.run import load_new_files

    config = replace(config, compute=ComputeConfig(dask="local:2"))

    @flow(name="bench-mirror-ingest")
    def ingest() -> Any:
        with DaskCluster(config) as cluster:
            return load_new_files(
                config,
                compact_fan_out=dask_compact_fan_out(config, cluster),
                load_fan_out=dask_load_fan_out(config, cluster),
            )

    with _prefect_server():
        load = os.getloadavg()[0]
        cpu, started = _cpu_s(), time.perf_counter()
        result: Any = ingest()
        wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
        _stop_forkserver()
    steps = dict(result.step_seconds)
    record = (config.data_dir / "raw" / RECORD_NAME).read_text(encoding="utf-8").splitlines()
    downloaded = sum(1 for line in record if json.loads(line)["etag"])
    return (
        f"ingest on local:2: {wall:.1f} s, {cpu:.2f} s of CPU on the pipeline host; copying "
        f"and listing the files {steps['reference files and listing']:.2f} s; {downloaded:,} "
        f"of {objects:,} objects downloaded by the pipeline host; {result.compaction}; load "
        f"average {load:.1f} -> {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64, help="GPUs, 8 a host (default 64)")
    parser.add_argument(
        "--ingest", action="store_true", help="time the whole ingest on local:2, not the copy"
    )
    arguments = parser.parse_args()
    spec = SimulationSpec(
        gpus=arguments.gpus, gpus_per_host=8, start=START, end=START + dt.timedelta(days=1)
    )
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as folder:
        root = Path(folder)
        with s3_store(root / "s3") as store:
            os.environ.update(store.environ)
            os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
            fleet = root / "fleet"
            simulate_window(spec, data_dir=fleet, start=spec.start, end=spec.end)
            location = S3Location.parse(f"s3://{BUCKET}/bench")
            fs = s3_filesystem(endpoint_url=store.endpoint_url)
            files = sorted((fleet / "raw" / "samples").rglob("*.parquet"))
            size_bytes = sum(path.stat().st_size for path in files)
            for path in files:
                key = location.path(path.relative_to(fleet / "raw").as_posix())
                with fs.open_output_stream(key) as out:
                    out.write(path.read_bytes())
            config = Config(
                data_dir=root / "data",
                raw_location=location.url,
                s3=S3Config(endpoint_url=store.endpoint_url),
            )
            if arguments.ingest:
                write_reference_files(scenario_for(spec), spec, config.data_dir)
                print(f"{arguments.gpus} GPUs x 1 day: " + _ingest(config, len(files)))
                return
            cpu, started = _cpu_s(), time.perf_counter()
            mirror_raw_location(config)
            wall, cpu = time.perf_counter() - started, _cpu_s() - cpu
    print(
        f"{arguments.gpus} GPUs x 1 day: {len(files):,} objects ({size_bytes / 1e6:.1f} MB) "
        f"copied in {wall:.2f} s "
        f"({cpu:.2f} s of CPU here): {1000 * wall / len(files):.2f} ms and "
        f"{1000 * cpu / len(files):.2f} ms of CPU an object; load average "
        f"{os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
