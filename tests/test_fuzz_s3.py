"""Fuzzing what comes from object storage: the keys a store lists under `raw_location`
(any character, `.` and `..` parts, empty parts, long names) and the locations themselves.
`gpufleet ingest` from a real S3 store (SeaweedFS, tests/s3_stack.py) exits 0, or 1 with
one line naming the location; whatever the keys, it writes below the data directory
alone, and a good file beside an odd key loads."""

from __future__ import annotations

import itertools
import os
import posixpath
from collections.abc import Iterator
from pathlib import PurePosixPath

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.integrations.mirror import local_path
from gpufleet.storage.s3 import S3Location, s3_filesystem
from tests.fuzzing import CELLS, assert_kept, examples, run_cli, scratch, tree, written_outside
from tests.s3_stack import BUCKET, S3Store
from tests.test_ingest import sample

GOOD = "samples/date=2026-11-16/host=good/good.parquet"
PART = st.one_of(
    st.sampled_from([*CELLS, ".", "..", "", ".hidden", "_tmp", "x" * 300, "date=2026-11-16"]),
    st.text(max_size=8),
)
KEYS = st.tuples(
    st.sampled_from(["samples", "allocations", "jobs", "samples/date=2026-11-16/host=h1"]),
    st.lists(PART, max_size=3),
    st.sampled_from([".parquet", ".csv", ""]),
).map(lambda key: "/".join([key[0], *key[1]]) + key[2])


@pytest.fixture(scope="module")
def store(s3: S3Store) -> Iterator[S3Store]:
    """The session's store, with its credentials in the environment for this module."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**s3.environ, "AWS_EC2_METADATA_DISABLED": "true"}.items():
            patch.setenv(name, value)
        yield s3


_prefixes = itertools.count()


def _parquet(rows: list[dict[str, object]]) -> bytes:
    sink = pa.BufferOutputStream()
    schema = SAMPLE_SCHEMA.with_metadata(file_metadata())
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
    return sink.getvalue().to_pybytes()


@given(keys=st.lists(KEYS, min_size=1, max_size=3))
@examples(10)
def test_ingest_from_a_store_with_odd_keys(store: S3Store, keys: list[str]) -> None:
    url = f"s3://{BUCKET}/fuzz-{os.getpid()}-{next(_prefixes)}"
    location = S3Location.parse(url)
    fs = s3_filesystem(endpoint_url=store.endpoint_url, max_attempts=1)
    good = _parquet([sample(0, gpu="GPU-good"), sample(10, gpu="GPU-good")])
    for key, content in [(GOOD, good), *((key, good) for key in keys)]:
        try:
            with fs.open_output_stream(location.path(key)) as out:
                out.write(content)
        except (OSError, pa.ArrowException):
            reject()  # a key the store itself refuses
    with scratch() as root:
        data_dir = root / "data"
        data_dir.mkdir()
        (data_dir / "gpufleet.toml").write_text(
            f'raw_location = "{url}"\n[s3]\nendpoint_url = "{store.endpoint_url}"\n'
        )
        before = tree(root)
        outcome = run_cli(["--data-dir", str(data_dir), "ingest"])
        assert_kept(outcome, names=(url,))
        assert not written_outside(root, data_dir, before)
        if outcome.status == 0:
            with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
                found = con.execute("select count(*) from samples where gpu_uuid = 'GPU-good'")
                assert found.fetchone() == (2,)


@given(relative=KEYS, site=st.none() | PART)
@examples(200)
def test_an_objects_local_path_stays_below_raw(relative: str, site: str | None) -> None:
    """Where `local_path` puts an object that `_objects` lists (below samples/,
    allocations/ or jobs/, no part starting with `.` or `_`): a relative path with no
    `..`, or None."""
    if any(part.startswith((".", "_")) for part in relative.split("/")):
        return  # never listed
    try:
        found = local_path(relative, site)
    except ValueError:
        return
    if found is not None:
        path = PurePosixPath(found)
        assert not path.is_absolute() and ".." not in path.parts, found
        assert posixpath.normpath(f"/raw/{found}").startswith("/raw/"), found


@given(url=st.one_of(st.text(max_size=30), st.tuples(st.just("s3://"), PART, PART).map("/".join)))
@examples(200)
def test_a_location_parses_or_says_what_is_wrong(url: str) -> None:
    try:
        location = S3Location.parse(url)
    except ValueError as exc:
        assert "\n" not in str(exc).replace("\\n", "")
        return
    assert location.url.startswith("s3://") and location.prefix.isprintable()
    assert ".." not in location.prefix.split("/")
