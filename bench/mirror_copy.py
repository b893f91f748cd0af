"""What the pipeline host's copy of an S3 `raw_location` costs: a simulated fleet's day
uploaded to a real store (SeaweedFS, tests/s3_stack.py, on this machine), then copied into
an empty data directory by `mirror_raw_location`, as an ingest does first. The copy of a
backfill's whole host-days is the part a Dask ingest could skip (docs/dask.md, reading from
the store).

    python -m bench.mirror_copy --gpus 256

Prints the objects, their bytes, the copy's wall time and this process's CPU time (the
store's own CPU is not counted: on a machine shared with it, the wall time is stretched).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import tempfile
import time
from pathlib import Path

from gpufleet.config import Config, S3Config
from gpufleet.integrations.mirror import mirror_raw_location
from gpufleet.simulate.fleet import SimulationSpec, simulate_window
from gpufleet.storage.s3 import S3Location, s3_filesystem
from tests.s3_stack import BUCKET, s3_store

START = dt.datetime(2026, 10, 5, tzinfo=dt.UTC)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=64, help="GPUs, 8 a host (default 64)")
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
