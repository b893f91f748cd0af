"""Object storage against a real S3 store (SeaweedFS, tests/s3_stack.py): the collector's
`--upload` (each finished file shipped whole, kept locally while the store is down, none lost
or partial), and an ingest whose `raw_location` is an s3:// URL (the uploaded rows exactly,
an object overwritten after load reported as changed, the store gone mid-ingest, an object
named with a control character or gone once listed skipped, a missing bucket one line)."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys
import time

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from gpufleet.cli import main
from gpufleet.collectors.collect import Collector
from gpufleet.collectors.service import _uploader
from gpufleet.collectors.upload import Uploader
from gpufleet.config import Config, S3Config, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations import mirror
from gpufleet.storage.s3 import S3Location, s3_filesystem
from gpufleet.warehouse.ingest import ingest
from gpufleet.warehouse.raw.quarantine import QUARANTINE_CHANGED
from tests.fake_nvml import ManualClock, fleet_scenario, install_fake
from tests.s3_stack import BUCKET, S3Store

pytestmark = pytest.mark.slow

GPUS = 2
TODAY = time.time() // 86400 * 86400 + 60  # 00:01 UTC today: recent, no midnight to cross
ALLOCATIONS = (
    "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
    "101,alice,vision,node-1,0,2026-11-16T08:00:00Z,2026-11-16T10:00:00Z\n"
)


@pytest.fixture
def store(s3: S3Store, monkeypatch) -> S3Store:
    for name, value in s3.environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return s3


@pytest.fixture
def url(tmp_path) -> str:
    """A prefix of this test's own in the session's bucket."""
    return f"s3://{BUCKET}/{tmp_path.name}"


def make_collector(data_dir, store, url, mono, wall, *, flush_s=60.0):
    collector = Collector(
        data_dir=data_dir,
        interval_s=10.0,
        flush_s=flush_s,
        host="node-1",
        wall_clock=wall,
        monotonic=mono,
        stderr=io.StringIO(),
        fsync=False,
    )
    collector.uploader = _uploader(collector, url, endpoint_url=store.endpoint_url, region="")
    return collector


def ticks(collector, mono, wall, count):
    for _ in range(count):
        mono.advance(10.0)
        wall.advance(10.0)
        collector.tick()


def objects(store, url) -> dict[str, pafs.FileInfo]:
    """The sample objects below `url`, by their name below it."""
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    selector = pafs.FileSelector(location.path("samples"), recursive=True, allow_not_found=True)
    return {
        location.relative(info.path): info
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
    }


def rows_in(store, infos) -> int:
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    return sum(pq.read_table(info.path, filesystem=fs).num_rows for info in infos.values())


def local_files(data_dir):
    return sorted(p.name for p in (data_dir / "raw" / "samples").rglob("*") if p.is_file())


def stderr_of(collector) -> str:
    return collector._stderr.getvalue()


def test_the_collector_uploads_each_finished_file_and_then_removes_it(
    monkeypatch, tmp_path, store, url
):
    mono, wall = ManualClock(), ManualClock(TODAY)
    install_fake(monkeypatch, fleet_scenario(GPUS), clock_us=mono.us)
    collector = make_collector(tmp_path / "host", store, url, mono, wall)
    collector.start()
    ticks(collector, mono, wall, 13)  # two flushes, each file uploaded at its tick
    assert len(objects(store, url)) == 2
    assert local_files(tmp_path / "host") == []
    assert collector.close()  # the last file, uploaded on the way out
    stored = objects(store, url)
    assert len(stored) == 3
    assert all(key.startswith("samples/date=") and "/host=node-1/" in key for key in stored)
    assert rows_in(store, stored) == 13 * GPUS
    assert local_files(tmp_path / "host") == []
    assert "error" not in stderr_of(collector)


def test_files_wait_while_the_store_is_down_and_none_is_lost_or_partial(
    monkeypatch, tmp_path, store, url
):
    mono, wall = ManualClock(), ManualClock(TODAY)
    install_fake(monkeypatch, fleet_scenario(GPUS), clock_us=mono.us)
    data_dir = tmp_path / "host"
    collector = make_collector(data_dir, store, url, mono, wall, flush_s=30.0)
    collector.start()
    uploader, collector.uploader = collector.uploader, None
    ticks(collector, mono, wall, 7)  # two files wait
    collector.uploader = uploader
    assert len(uploader.pending()) == 2
    upload_one = Uploader._upload_one
    calls = []

    def store_goes_away(self, path):
        calls.append(path)
        if len(calls) == 2:
            store.stop()
        upload_one(self, path)

    monkeypatch.setattr(Uploader, "_upload_one", store_goes_away)
    try:
        # The store goes away in the middle of a round: after the first of the two files.
        assert not uploader.upload()
        assert len(calls) == 2
        assert len(uploader.pending()) == 1
        assert stderr_of(collector).count(f"cannot upload {calls[1].name} to {url}") == 1
        ticks(collector, mono, wall, 9)  # three more files; retried with backoff, one line
        assert len(uploader.pending()) == 4
        assert stderr_of(collector).count("cannot upload") == 1
        assert collector.close()  # written; not uploaded: a restart finds the files
    finally:
        store.start()
    assert "5 file(s) not uploaded yet" in stderr_of(collector)
    assert len(local_files(data_dir)) == 5
    assert len(objects(store, url)) == 1

    restarted = make_collector(data_dir, store, url, mono, wall, flush_s=30.0)
    restarted.start()
    assert local_files(data_dir) == []
    stored = objects(store, url)
    assert len(stored) == 6
    assert rows_in(store, stored) == 16 * GPUS  # every tick, once
    assert not any(part.startswith(".") for key in stored for part in key.split("/"))
    restarted.close()


def pipeline_config(tmp_path, store, url) -> Config:
    return Config(
        data_dir=tmp_path / "pipeline",
        raw_location=url,
        s3=S3Config(endpoint_url=store.endpoint_url),
    )


def upload_samples(monkeypatch, tmp_path, store, url, ticks_count=13) -> dict[str, pafs.FileInfo]:
    mono, wall = ManualClock(), ManualClock(TODAY)
    install_fake(monkeypatch, fleet_scenario(GPUS), clock_us=mono.us)
    collector = make_collector(tmp_path / "host", store, url, mono, wall)
    collector.start()
    ticks(collector, mono, wall, ticks_count)
    assert collector.close()
    return objects(store, url)


def test_ingest_from_s3_loads_exactly_the_uploaded_rows(monkeypatch, tmp_path, store, url):
    stored = upload_samples(monkeypatch, tmp_path, store, url)
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    allocations = S3Location.parse(url).path("allocations/slurm-2026-11-16.csv")
    with fs.open_output_stream(allocations) as out:
        out.write(ALLOCATIONS.encode())
    config = pipeline_config(tmp_path, store, url)

    result = ingest(config, compact=False)
    assert result.files_loaded == len(stored) == 3
    assert result.samples_loaded == rows_in(store, stored) == 13 * GPUS
    assert result.allocations == 1
    assert not result.quarantined
    for key, info in stored.items():  # the local copies are the objects' bytes
        assert (config.data_dir / "raw" / key).stat().st_size == info.size

    again = ingest(config, compact=False)
    assert (again.files_loaded, again.samples_loaded) == (0, 0)


def test_an_object_overwritten_after_load_is_reported_as_changed(monkeypatch, tmp_path, store, url):
    stored = upload_samples(monkeypatch, tmp_path, store, url)
    config = pipeline_config(tmp_path, store, url)
    assert ingest(config, compact=False).files_loaded == 3

    key, info = sorted(stored.items())[0]
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    table = pq.read_table(info.path, filesystem=fs)
    pq.write_table(table.slice(1), info.path, filesystem=fs)  # a row fewer: other bytes
    warned: list[str] = []
    result = ingest(config, compact=False, warn=warned.append)
    assert [item.path for item in result.quarantined] == [f"raw/{key}"]
    assert QUARANTINE_CHANGED in result.quarantined[0].reason
    assert any(QUARANTINE_CHANGED in line for line in warned)
    assert result.files_loaded == 0


def test_the_store_gone_mid_ingest_is_one_line_and_a_rerun_loads_the_rest(
    monkeypatch, tmp_path, store, url, capsys
):
    stored = upload_samples(monkeypatch, tmp_path, store, url)
    config = pipeline_config(tmp_path, store, url)
    copy = mirror._copy
    copies = []

    def store_goes_away(fs, info, target, known):
        copies.append(info.path)
        if len(copies) == 2:
            store.stop()
        return copy(fs, info, target, known)

    monkeypatch.setattr(mirror, "_copy", store_goes_away)
    try:
        with pytest.raises(GpufleetError) as failed:
            ingest(config, compact=False)
        message = str(failed.value)
        assert "\n" not in message
        assert f"cannot read the raw files from {url} at {store.endpoint_url}" in message
        assert "1 new file(s) copied before are kept" in message
        raw = config.data_dir / "raw"
        assert not [p for p in raw.rglob(".*") if p.name != mirror.RECORD_NAME]  # no temporary
        assert len(list((raw / "samples").rglob("*.parquet"))) == 1  # whole, for next time
        # The command: one line, a non-zero exit.
        toml = tmp_path / "gpufleet.toml"
        toml.write_text(
            f'data_dir = "{config.data_dir}"\nraw_location = "{url}"\n'
            f'[s3]\nendpoint_url = "{store.endpoint_url}"\n'
        )
        assert main(["--config", str(toml), "ingest"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gpufleet: error: cannot read the raw files")
    finally:
        store.start()
    monkeypatch.setattr(mirror, "_copy", copy)
    result = ingest(config, compact=False)
    assert result.files_loaded == len(stored)
    assert result.samples_loaded == 13 * GPUS


def test_an_object_named_with_a_control_character_is_skipped_with_one_warning(
    monkeypatch, tmp_path, store, url, caplog
):
    stored = upload_samples(monkeypatch, tmp_path, store, url)
    fs = s3_filesystem(endpoint_url=store.endpoint_url)
    location = S3Location.parse(url)
    good = next(iter(stored.values()))
    odd = [  # SeaweedFS lists each of these with U+FFFD for the control character
        good.path.replace(".parquet", "\x1b[31m.parquet"),
        location.path("allocations/slurm\x07.csv"),
    ]
    fs.copy_file(good.path, odd[0])
    with fs.open_output_stream(odd[1]) as out:
        out.write(ALLOCATIONS.encode())
    config = pipeline_config(tmp_path, store, url)

    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        result = ingest(config, compact=False)
    assert (result.files_loaded, result.samples_loaded) == (3, 13 * GPUS)  # the rest loads
    warned = [r.getMessage() for r in caplog.records if "control character" in r.getMessage()]
    assert len(warned) == 2
    for line, name in zip(warned, ("[31m.parquet: not copied", "allocations/slurm"), strict=True):
        assert line.startswith(f"{url}/") and name in line
        assert line.isprintable() and ("\\x1b" in line or "\\ufffd" in line or "\\x07" in line)
    assert all(p.name.isprintable() for p in (config.data_dir / "raw").rglob("*"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        again = ingest(config, compact=False)
    assert (again.files_loaded, again.quarantined) == (0, ())
    assert not caplog.records  # warned once (again only when the object changes)


def test_an_object_gone_once_listed_is_skipped_and_the_rest_loads(
    monkeypatch, tmp_path, store, url, caplog
):
    stored = upload_samples(monkeypatch, tmp_path, store, url)
    config = pipeline_config(tmp_path, store, url)
    listed = mirror._objects
    gone = sorted(stored.values(), key=lambda info: info.path)[0]

    def deleted_after_listing(fs, location, folder, suffix):
        found = listed(fs, location, folder, suffix)
        if folder == "samples":
            fs.delete_file(gone.path)  # another process's delete, between list and read
        return found

    monkeypatch.setattr(mirror, "_objects", deleted_after_listing)
    with caplog.at_level(logging.WARNING, logger="gpufleet.ingest"):
        result = ingest(config, compact=False)
    assert result.files_loaded == 2
    assert [r.getMessage() for r in caplog.records] == [
        f"{url}/{S3Location.parse(url).relative(gone.path)}: not copied: listed, but not "
        "found when opened (deleted since, or the store lists it by another name); the next "
        "ingest looks again"
    ]


def test_a_bucket_that_does_not_exist_is_one_line_and_exit_1(tmp_path, store, capsys):
    missing = "s3://gpufleet-no-such-bucket/raw"
    config = pipeline_config(tmp_path, store, missing)
    problem = (
        f"'raw_location' ({missing}): no bucket 'gpufleet-no-such-bucket' at "
        f"{store.endpoint_url}: create it, or correct the setting"
    )
    with pytest.raises(GpufleetError) as failed:
        ingest(config, compact=False)
    assert str(failed.value) == problem
    toml = tmp_path / "gpufleet.toml"
    toml.write_text(
        f'data_dir = "{config.data_dir}"\nraw_location = "{missing}"\n'
        f'[s3]\nendpoint_url = "{store.endpoint_url}"\n'
    )
    assert main(["--config", str(toml), "ingest"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [f"gpufleet: error: {problem}"]
    # a bucket that exists, with nothing below the prefix yet: no error, nothing loaded
    empty = pipeline_config(tmp_path, store, f"s3://{BUCKET}/{tmp_path.name}/empty")
    assert ingest(empty, compact=False).files_loaded == 0


def test_raw_location_and_s3_settings_are_checked(tmp_path, capsys):
    toml = tmp_path / "gpufleet.toml"
    toml.write_text(
        'raw_location = "s3://fleet-raw/site-a/"\n'
        '[s3]\nendpoint_url = "http://127.0.0.1:8333"\nregion = "eu-west-1"\n'
    )
    config = load_config(config_path=toml)
    assert config.raw_location == "s3://fleet-raw/site-a"
    assert (config.s3.endpoint_url, config.s3.region) == ("http://127.0.0.1:8333", "eu-west-1")
    assert Config().raw_location == ""  # default: <data_dir>/raw
    for text, problem in (
        ('raw_location = "/mnt/raw"\n', "'raw_location' must be an s3://bucket/prefix URL"),
        ('[s3]\nendpoint_url = "minio:9000"\n', "'s3.endpoint_url' is not an http(s) URL"),
        ('[s3]\nsecret_access_key = "x"\n', "unknown key 's3.secret_access_key'"),
        (
            'raw_location = "s3://fleet/../x"\n',
            "line 1: 'raw_location' must be an s3://bucket/prefix URL: an empty, '.' or '..' "
            "part in the prefix of 's3://fleet/../x'",
        ),
        (
            'raw_location = "s3://fleet/a\\u001bb"\n',
            "line 1: 'raw_location' must be an s3://bucket/prefix URL: a control character in "
            "the prefix of 's3://fleet/a\\x1bb'",
        ),
    ):
        toml.write_text(text)
        with pytest.raises(GpufleetError, match=re.escape(problem)) as failed:
            load_config(config_path=toml)
        assert "\n" not in str(failed.value)
    toml.write_text('raw_location = "s3://fleet/../x"\n')  # the command: one line, exit 1
    assert main(["--config", str(toml), "ingest"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("part in the prefix of 's3://fleet/../x'")


def test_an_s3_location_names_its_objects():
    location = S3Location.parse("s3://fleet-raw/site-a/")
    assert location.url == "s3://fleet-raw/site-a"
    assert location.path("samples/x.parquet") == "fleet-raw/site-a/samples/x.parquet"
    assert location.relative("fleet-raw/site-a/samples/x.parquet") == "samples/x.parquet"
    assert S3Location.parse("s3://fleet-raw").path("jobs") == "fleet-raw/jobs"
    for bad in (
        "http://x/y",
        "s3://",
        "s3://Bad_Bucket/x",
        "s3://bucket/a//b",
        "s3://bucket/a\x1b",
    ):
        with pytest.raises(ValueError):
            S3Location.parse(bad)


def test_the_collectors_upload_needs_no_pipeline_package():
    code = (
        "import sys\n"
        "for name in ('duckdb', 'prefect', 'polars', 'altair', 'numpy', 'jinja2'):\n"
        "    sys.modules[name] = None\n"
        "import gpufleet.collectors.upload, gpufleet.cli.collect\n"
        "print('ok')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert completed.stdout.strip() == "ok", completed.stderr
