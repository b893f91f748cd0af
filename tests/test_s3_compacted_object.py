"""A compacted file left in the store by a Dask ingest (`integrations/pending.py`): an
object named as a host-day's compacted file (another warehouse's lake copied into the
bucket), its host-day with no file here, loaded as a new file from the store."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpufleet.storage.s3 import S3Location, s3_filesystem
from gpufleet.warehouse.ingest import ingest
from tests.s3_stack import BUCKET, S3Store
from tests.test_compact import DAY, loaded_files_rows, midnight, sample_rows
from tests.test_dask_s3 import _configured, _in_process, store

pytest.importorskip("prefect_dask")
pytestmark = [pytest.mark.slow, pytest.mark.stack, pytest.mark.fleet]

__all__ = ["store"]  # the fixture, shared with test_dask_s3.py


def test_a_compacted_object_left_in_the_store_loads_as_a_new_file(
    store: S3Store, tmp_path: Path
) -> None:
    """Its samples load (from the store, on the workers), `loaded_files` records it, and
    the next ingest loads nothing again, where the ingest failed with a traceback
    (FileNotFoundError: its content hash read from a copy here that there is not)."""
    url = f"s3://{BUCKET}/{tmp_path.name}"
    name = f"samples/date={DAY}/host=node-1/compacted-{DAY}.parquet"
    buffer = io.BytesIO()
    pq.write_table(sample_rows(midnight(DAY), 30, ("GPU-a", "GPU-b")), buffer)
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    with fs.open_output_stream(S3Location.parse(url).path(name)) as out:
        out.write(buffer.getvalue())
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    config = _configured(data_dir, store, url, "")
    compacting, loading = _in_process(config, [])
    result = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert (result.files_loaded, result.samples_loaded) == (1, 60)
    assert [row[:3] for row in loaded_files_rows(config)] == [
        (f"raw/{name}", len(buffer.getvalue()), 60)
    ]
    again = ingest(config, compact_fan_out=compacting, load_fan_out=loading)
    assert (again.files_loaded, again.samples_loaded, again.quarantined) == (0, 0, ())
