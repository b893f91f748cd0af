"""Reference files, allocations and Slurm job records: loaded as tables; a bad reference file
fails and changes nothing, a bad line of an allocation or job file is quarantined."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import duckdb
import pytest

from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.warehouse.ingest import ingest, load_warehouse
from gpufleet.warehouse.publish import write_transaction
from gpufleet.warehouse.refs import published_allocation_files, read_references
from tests.templates import made_once
from tests.test_ingest import DAY1, sample, write_samples

pytestmark = pytest.mark.fleet

USERS = "user,team\nalice,vision\nbob,nlp\nalice,vision\n"
HOSTS = "host_glob,team\ngpu-vis-*,vision\ngpu-??,infra\n"
PRICES = "gpu_glob,usd_per_gpu_hour\n*H100*,2.5\n*A100*,1.25\n"
ALLOCATIONS = (
    "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
    "101,alice,,h1,0,2026-11-16T08:00:00+01:00,2026-11-16T10:00:00Z\n"
    '102,bob,"nlp",h1,1,2026-11-16T09:00:00Z,\n'
)


@pytest.fixture
def config(config: Config) -> Config:
    """The shared `config` (tests/conftest.py) with every reference file and an allocation
    export written."""
    return _with_references(config)


@pytest.fixture
def ingested(tmp_path: Path) -> Config:
    """`config`'s files and one sample file (DAY1's a.parquet) ingested: the first ingest of
    the tests that then add a bad file, made once per test process and copied
    (tests/templates.py)."""

    def fill(data_dir: Path) -> None:
        config = _with_references(Config(data_dir=data_dir))
        write_samples(data_dir, f"{DAY1}/a.parquet", [sample(0)])
        ingest(config)

    return Config(data_dir=made_once("test_refs.ingested", fill, tmp_path / "data"))


def _with_references(config: Config) -> Config:
    write(config, "ref/users.csv", USERS)
    write(config, "ref/hosts.csv", HOSTS)
    write(config, "ref/prices.csv", PRICES)
    write(config, "raw/allocations/slurm-2026-11-16.csv", ALLOCATIONS)
    return config


def write(config: Config, relative: str, text: str) -> Path:
    path = config.data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def rows(config: Config, sql: str) -> list[tuple[object, ...]]:
    return tables(config, sql)[0]


def tables(config: Config, *sqls: str) -> list[list[tuple[object, ...]]]:
    """Each query's rows, read on one connection: opening the warehouse file (its catalog)
    costs more than a small query, and the parametrized cases below query it often."""
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        return [con.execute(sql).fetchall() for sql in sqls]


def utc(year: int, month: int, day: int, hour: int) -> dt.datetime:
    return dt.datetime(year, month, day, hour, tzinfo=dt.UTC)


def test_reference_files_become_tables(config: Config) -> None:
    result = ingest(config)
    assert (result.users, result.host_rules, result.price_rules, result.allocations) == (2, 2, 2, 2)
    assert rows(config, 'select "user", team from ref_users order by 1') == [
        ("alice", "vision"),
        ("bob", "nlp"),
    ]
    assert rows(config, "select * from ref_hosts order by rule_order") == [
        (1, "gpu-vis-*", "vision", None),
        (2, "gpu-??", "infra", None),
    ]
    assert rows(config, "select * from ref_prices order by rule_order") == [
        (1, "*H100*", 2.5, None),
        (2, "*A100*", 1.25, None),
    ]
    assert rows(config, "select * from allocations order by job_id") == [
        ("101", "alice", None, "h1", 0, utc(2026, 11, 16, 7), utc(2026, 11, 16, 10),
         "raw/allocations/slurm-2026-11-16.csv", None, None),
        ("102", "bob", "nlp", "h1", 1, utc(2026, 11, 16, 9), None,
         "raw/allocations/slurm-2026-11-16.csv", None, None),
    ]  # fmt: skip


def test_each_ingest_replaces_the_reference_tables(config: Config) -> None:
    first = ingest(config)
    assert first.references_changed and first.loaded_anything
    unchanged = ingest(config)
    assert not unchanged.references_changed and not unchanged.loaded_anything
    write(config, "ref/users.csv", "team,user\nnlp,carol\n")  # columns in any order
    (config.data_dir / "ref/prices.csv").unlink()
    write(config, "raw/allocations/_draft.csv", "garbage, ignored: starts with _")
    assert ingest(config).loaded_anything
    users, prices, allocations = tables(
        config,
        'select "user", team from ref_users',
        "select count(*) from ref_prices",
        "select count(*) from allocations",
    )
    assert users == [("carol", "nlp")]
    assert prices == [(0,)]
    assert allocations == [(2,)]


def test_missing_reference_files_are_empty_tables(tmp_path: Path) -> None:
    config = Config(data_dir=tmp_path / "data")
    references = read_references(config)
    assert references.users == references.hosts == references.prices == ()
    assert references.allocations == ()
    ingest(config)
    names = ("ref_users", "ref_hosts", "ref_prices", "allocations")
    counts = tables(config, *(f"select count(*) from {table}" for table in names))
    assert dict(zip(names, counts, strict=True)) == {table: [(0,)] for table in names}


def test_empty_cells_are_null_and_blank_lines_are_skipped(config: Config) -> None:
    write(
        config,
        "raw/allocations/a.csv",
        "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
        "\n"
        " ,carol , ,h2,3,2026-11-16T09:00:00Z,  \n",
    )
    references = read_references(config)
    carol = [a for a in references.allocations if a.source_file == "raw/allocations/a.csv"]
    assert [(a.job_id, a.user, a.team, a.host, a.gpu_index, a.end_ts) for a in carol] == [
        (None, "carol", None, "h2", 3, None)
    ]


@pytest.mark.parametrize(
    ("relative", "text", "message"),
    [
        ("ref/users.csv", "user\nalice\n", r"ref/users\.csv: line 1: missing column 'team'"),
        (
            "ref/users.csv",
            "user,team,mail\nalice,vision,a@x\n",
            r"ref/users\.csv: line 1: unknown column 'mail' in header",
        ),
        (
            "ref/users.csv",
            "user,team\nalice,vision\nbob,nlp\nalice,infra\n",
            r"ref/users\.csv: line 4: user 'alice' is mapped to team 'infra' but line 2",
        ),
        ("ref/users.csv", "user,team\nalice,vision,extra\n", r"line 2: expected 2 fields"),
        ("ref/hosts.csv", "host_glob,team\n,vision\n", r"ref/hosts\.csv: line 2: 'host_glob' is"),
        (
            "ref/prices.csv",
            "gpu_glob,usd_per_gpu_hour\n*H100*,2.5\n*A100*,two\n",
            r"ref/prices\.csv: line 3: 'usd_per_gpu_hour' is not a number: 'two'",
        ),
        (
            "ref/prices.csv",
            "gpu_glob,usd_per_gpu_hour\n*H100*,-1\n",
            r"ref/prices\.csv: line 2: 'usd_per_gpu_hour' must be a number >= 0",
        ),
        ("ref/users.csv", 'user,team\n"alice,vision\n', r"ref/users\.csv: line \d: malformed CSV"),
    ],
)
def test_a_bad_reference_file_fails_naming_file_and_line_and_changes_nothing(
    ingested: Config, relative: str, text: str, message: str
) -> None:
    config = ingested
    before = config.warehouse_path.read_bytes()
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10)])  # must not load
    write(config, relative, text)

    with pytest.raises(GpufleetError, match=message) as raised:
        ingest(config)

    assert "\n" not in str(raised.value)
    assert str(raised.value).startswith(str(config.data_dir / relative))
    assert config.warehouse_path.read_bytes() == before
    samples, loaded = tables(
        config, "select count(*) from samples", "select count(*) from loaded_files"
    )
    assert samples == [(1,)]
    assert loaded == [(1,)]
    assert not [p for p in config.data_dir.iterdir() if re.search(r"\.tmp$", p.name)]


ALLOCATION_HEADER = "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
GOOD_ALLOCATION = "9,bob,,h2,1,2026-11-16T08:00:00Z,\n"
GOOD_JOB = "9,2026-11-16T08:00:00Z,h1\n"


@pytest.mark.parametrize(
    ("relative", "text", "reason", "loaded"),
    [
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + "1,alice,,h1,0,2026-11-16T08:00:00Z,\n2,alice,,h1,0,yesterday,\n",
            r"^line 3: 'start_ts' is not an ISO-8601 timestamp: 'yesterday'$",
            1,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + "1,alice,,h1,0,2026-11-16T08:00:00,\n" + GOOD_ALLOCATION,
            r"^line 2: 'start_ts' has no UTC offset: '2026-11-16T08:00:00'",
            1,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + "1,alice,,h1,0,2026-11-16T08:00:00Z,2026-11-16T09:00:00\n",
            r"^line 2: 'end_ts' has no UTC offset",
            0,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER
            + GOOD_ALLOCATION
            + "1,alice,,h1,0,2026-11-16T08:00:00Z,2026-11-16T07:00:00Z\n",
            r"^line 3: 'end_ts' is before 'start_ts'$",
            1,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + "1,alice,,h1,gpu0,2026-11-16T08:00:00Z,\n" + GOOD_ALLOCATION,
            r"^line 2: 'gpu_index' is not a whole number: 'gpu0'$",
            1,
        ),
        (  # a MIG device's UUID as no driver writes it
            "raw/allocations/pods.csv",
            "job_id,user,team,host,gpu_index,gpu_uuid,start_ts,end_ts\n"
            "ns/a,,ml,h1,,MIG-3g.40gb 1,2026-11-16T08:00:00Z,\n"
            "ns/b,,ml,h1,,MIG-5a1e0c4d-3b2f-5d6e-8f90-112233445566,2026-11-16T08:00:00Z,\n",
            r"^line 2: 'gpu_uuid' is not a GPU or MIG device UUID \(GPU-\.\.\. or MIG-\.\.\.\): "
            r"'MIG-3g\.40gb 1'$",
            1,
        ),
        (  # neither a GPU index nor a UUID
            "raw/allocations/pods.csv",
            "job_id,user,team,host,gpu_index,gpu_uuid,start_ts,end_ts\n"
            "ns/a,,ml,h1,,,2026-11-16T08:00:00Z,\n"
            "ns/b,,ml,h1,,GPU-5a1e0c4d-3b2f-5d6e-8f90-112233445566,2026-11-16T08:00:00Z,\n",
            r"^line 2: 'gpu_index' is empty$",
            1,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + '1,alice,,h1,0,"2026-11-16T08:00:00Z"x,\n' + GOOD_ALLOCATION,
            r"^line 2: malformed CSV: ",
            1,
        ),
        (
            "raw/allocations/slurm-2026-11-16.csv",
            ALLOCATION_HEADER + "1,alice,,h1,0,2026-11-16T08:00:00Z\n" + GOOD_ALLOCATION,
            r"^line 2: expected 7 fields \(job_id,user,team,host,gpu_index,start_ts,end_ts\), "
            r"got 6$",
            1,
        ),
        (
            "raw/jobs/slurm-c1-2026-11-16.csv",
            "job_id,start_ts\n,2026-11-16T08:00:00Z\n9,2026-11-16T08:00:00Z\n",
            r"^line 2: 'job_id' is empty$",
            1,
        ),
        (
            "raw/jobs/own-export.csv",
            "job_id,start_ts,hosts\n7,2026-11-16T08:00:00Z,h1\n8,2026-11-16T08:00:00Z,h1\n"
            "7,2026-11-16T09:00:00+01:00,h2\n",
            r"^line 4: job '7' starting at 2026-11-16T08:00:00\+00:00 is listed twice "
            r"\(first on line 2\)$",
            2,
        ),
        (
            "raw/jobs/own-export.csv",
            'job_id,start_ts,hosts\n7,2026-11-16T08:00:00Z,"h1,h2"\n' + GOOD_JOB,
            r"^line 2: 'hosts' must be host names separated by spaces",
            1,
        ),
        (
            "raw/jobs/own-export.csv",
            "job_id,start_ts,gpus\n7,2026-11-16T08:00:00Z,two\n9,2026-11-16T08:00:00Z,1\n",
            r"^line 2: 'gpus' is not a whole number: 'two'$",
            1,
        ),
        (  # as `import slurm` wrote a job whose end sacct gave before its start
            "raw/jobs/slurm-c1-2026-11-16.csv",
            "job_id,job_id_raw,cluster,user,account,partition,state,team,gpus,hosts,start_ts,"
            "end_ts\n4242,4242,c1,alice,cv-lab,gpu,COMPLETED,vision,1,h1,2026-11-16T08:00:00Z,"
            "2026-11-16T07:00:00Z\n4243,4243,c1,bob,asr,gpu,RUNNING,,1,h1,"
            "2026-11-16T08:30:00Z,\n",
            r"^line 2: 'end_ts' is before 'start_ts'$",
            1,
        ),
    ],
)
def test_a_bad_line_of_an_allocation_or_job_file_is_quarantined_and_the_rest_loads(
    ingested: Config, relative: str, text: str, reason: str, loaded: int
) -> None:
    """An allocation or job file is raw input: a bad line is listed in quarantined_files
    (its line in the reason, no destination) and named in a warning; the file stays, its
    other lines and every sample load, and the ingest succeeds."""
    config = ingested
    write_samples(config.data_dir, f"{DAY1}/b.parquet", [sample(10)])
    path = write(config, relative, text)
    warned: list[str] = []

    result = ingest(config, warn=warned.append)

    (quarantined,) = result.quarantined
    assert (quarantined.path, quarantined.moved_to) == (relative, None)
    assert re.search(reason, quarantined.reason)
    assert warned == [str(quarantined)]
    assert "\n" not in warned[0] and warned[0].startswith(f"quarantined {relative}, line ")
    table = "allocations" if relative.startswith("raw/allocations/") else "slurm_jobs"
    file_rows = f"select count(*) from {table} where source_file = '{relative}'"
    recorded, samples, from_file = tables(
        config,
        "select path, reason, moved_to from quarantined_files",
        "select count(*) from samples",
        file_rows,
    )
    assert recorded == [(relative, quarantined.reason, None)]
    assert path.read_text(encoding="utf-8") == text  # the file stays as it is
    assert samples == [(2,)]
    assert from_file == [(loaded,)]
    # Read again (the importer rewrote the file, the bad line still in it): not recorded or
    # named twice; the file's rows are its lines' that load.
    _touch_later(path)
    again: list[str] = []
    assert ingest(config, warn=again.append).quarantined == ()
    assert again == []
    recorded, from_file = tables(config, "select count(*) from quarantined_files", file_rows)
    assert recorded == [(1,)]
    assert from_file == [(loaded,)]


@pytest.mark.parametrize(
    ("relative", "content", "reason"),
    [
        (
            "raw/allocations/slurm-2026-11-16.csv",
            b"job_id,user,team,host,start_ts,end_ts\n1,alice,,h1,2026-11-16T08:00:00Z,\n",
            r"^line 1: missing column 'gpu_index' in header",
        ),
        (
            "raw/jobs/slurm-c1-2026-11-16.csv",
            b"job_id,user,team\n7,alice,vision\n",
            r"^line 1: missing column 'start_ts' in header",
        ),
        (
            "raw/jobs/own-export.csv",
            b"job_id,start_ts,nodes\n7,2026-11-16T08:00:00Z,h1\n",
            r"^line 1: unknown column 'nodes' in header",
        ),
        (
            "raw/jobs/own-export.csv",
            b"job_id,start_ts\n7,2026-11-16T08:00:00Z\n\xff\xfe,2026-11-16T09:00:00Z\n",
            r"^not UTF-8 text \(invalid start byte\)$",
        ),
    ],
)
def test_an_allocation_or_job_file_no_line_of_which_reads_is_quarantined_whole(
    config: Config, relative: str, content: bytes, reason: str
) -> None:
    """A bad header or encoding: the file is moved to quarantine/ as a bad sample file is;
    the other files and the samples load."""
    write_samples(config.data_dir, f"{DAY1}/a.parquet", [sample(0)])
    path = config.data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)

    result = ingest(config, warn=lambda line: None)

    (quarantined,) = result.quarantined
    assert (quarantined.path, quarantined.moved_to) == (relative, f"quarantine/{relative}")
    assert re.search(reason, quarantined.reason)
    assert not path.exists()
    assert (config.data_dir / "quarantine" / relative).read_bytes() == content
    samples, allocations, listed = tables(
        config,
        "select count(*) from samples",
        "select count(*) from allocations",
        "select path from build_state.allocation_files",
    )
    assert samples == [(1,)]
    assert allocations == [(0 if "alloc" in relative else 2,)]
    assert listed == ([] if "alloc" in relative else [("raw/allocations/slurm-2026-11-16.csv",)])


def test_a_bad_reference_file_on_the_first_ingest_creates_no_warehouse(config: Config) -> None:
    write(config, "ref/prices.csv", "gpu_glob,usd_per_gpu_hour\n*,1e999\n")
    with pytest.raises(GpufleetError, match=r"line 2: 'usd_per_gpu_hour' must be a number"):
        ingest(config)
    assert not config.warehouse_path.exists()


def test_a_file_that_is_not_utf8_fails_with_its_name(config: Config) -> None:
    (config.data_dir / "ref/users.csv").write_bytes(b"user,team\n\xff\xfe,vision\n")
    with pytest.raises(GpufleetError, match=r"ref/users\.csv: not UTF-8 text"):
        read_references(config)


def _rewrite_keeping_size_and_mtime(path: Path, old: str, new: str) -> None:
    """Change a file's text as no collector or scheduler would: same size, same mtime."""
    assert len(old) == len(new)
    stat = path.stat()
    path.write_text(path.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _touch_later(path: Path) -> None:
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


ALLOCATION_USERS = 'select "user" from allocations order by source_file, job_id'


def test_an_allocation_file_is_read_again_only_when_its_size_or_mtime_changed(
    config: Config,
) -> None:
    path = config.data_dir / "raw/allocations/slurm-2026-11-16.csv"
    ingest(config)
    assert rows(config, ALLOCATION_USERS) == [("alice",), ("bob",)]

    _rewrite_keeping_size_and_mtime(path, "alice", "carol")
    assert read_references(config, known=published_allocation_files(config)).allocations == ()
    unchanged = ingest(config)
    assert rows(config, ALLOCATION_USERS) == [("alice",), ("bob",)]
    assert not unchanged.references_changed
    assert unchanged.allocations == 2  # counted in the warehouse, not among the rows read

    _touch_later(path)
    assert ingest(config).references_changed
    assert rows(config, ALLOCATION_USERS) == [("carol",), ("bob",)]


def test_a_changed_or_removed_allocation_file_replaces_only_its_own_rows(config: Config) -> None:
    write(config, "raw/allocations/slurm-2026-11-17.csv", ALLOCATIONS.replace("\n10", "\n20"))
    first = config.data_dir / "raw/allocations/slurm-2026-11-16.csv"
    ingest(config)
    assert rows(config, "select job_id from allocations order by 1") == [
        ("101",),
        ("102",),
        ("201",),
        ("202",),
    ]
    # The first file's rows stay as the warehouse has them: it is not read again.
    _rewrite_keeping_size_and_mtime(first, "alice", "carol")
    write(
        config,
        "raw/allocations/slurm-2026-11-17.csv",
        ALLOCATIONS.replace("\n10", "\n30").replace("alice", "dave"),
    )
    assert ingest(config).references_changed
    assert rows(config, 'select job_id, "user" from allocations order by 1') == [
        ("101", "alice"),
        ("102", "bob"),
        ("301", "dave"),
        ("302", "bob"),
    ]
    (config.data_dir / "raw/allocations/slurm-2026-11-17.csv").unlink()
    assert ingest(config).references_changed
    assert rows(config, "select job_id from allocations order by 1") == [("101",), ("102",)]
    assert rows(config, "select path from build_state.allocation_files") == [
        ("raw/allocations/slurm-2026-11-16.csv",)
    ]


def test_a_warehouse_that_never_listed_its_allocation_files_reads_them_all(
    config: Config,
) -> None:
    ingest(config)
    # As a warehouse from before the list: no list, and rows of a file since removed.
    with write_transaction(config) as con:
        con.execute("drop table build_state.allocation_files")
        con.execute(
            "insert into allocations select * replace ('raw/allocations/gone.csv' as"
            " source_file) from allocations"
        )
    _rewrite_keeping_size_and_mtime(
        config.data_dir / "raw/allocations/slurm-2026-11-16.csv", "alice", "carol"
    )
    assert ingest(config).references_changed
    assert rows(config, ALLOCATION_USERS) == [("carol",), ("bob",)]


def test_an_allocation_file_another_ingest_read_differently_is_read_in_the_transaction(
    config: Config,
) -> None:
    """`known` comes from the published warehouse before the write transaction opens; a
    file it calls unchanged that this warehouse read at another (size, mtime) is read then,
    and a bad line of it is quarantined as one of a file read first is."""
    path = config.data_dir / "raw/allocations/slurm-2026-11-16.csv"
    stat = path.stat()
    known = {"raw/allocations/slurm-2026-11-16.csv": (stat.st_size, stat.st_mtime_ns)}
    references = read_references(config, known=known)
    assert references.allocations == ()
    load_warehouse(config, references, [])
    assert rows(config, ALLOCATION_USERS) == [("alice",), ("bob",)]

    write(config, "raw/allocations/slurm-2026-11-16.csv", ALLOCATIONS + "103,eve,,h1,x,,\n")
    stat = path.stat()
    known = {"raw/allocations/slurm-2026-11-16.csv": (stat.st_size, stat.st_mtime_ns)}
    result = load_warehouse(config, read_references(config, known=known), [])
    assert [(q.path, q.reason, q.moved_to) for q in result.quarantined] == [
        ("raw/allocations/slurm-2026-11-16.csv", "line 4: 'start_ts' is empty", None)
    ]
    assert rows(config, "select reason from quarantined_files") == [
        ("line 4: 'start_ts' is empty",)
    ]
    assert rows(config, ALLOCATION_USERS) == [("alice",), ("bob",)]


JOBS = (
    "job_id,job_id_raw,cluster,user,account,partition,state,team,gpus,hosts,start_ts,end_ts\n"
    "4242,,c1,alice,cv-lab,gpu,COMPLETED,vision,2,h1 h2,2026-11-16T08:00:00Z,"
    "2026-11-16T09:00:00Z\n"
    "4243_1,4250,c1,bob,asr,gpu,RUNNING,,1,h1,2026-11-16T08:30:00Z,\n"
)
JOB_TEAMS = "select job_id, team, hosts from slurm_jobs order by source_file, job_id"


def test_job_records_become_slurm_jobs(config: Config) -> None:
    write(config, "raw/jobs/slurm-c1-2026-11-16.csv", JOBS)
    # a site's own export: any column order, only job_id and start_ts required
    write(config, "raw/jobs/site.csv", "start_ts,job_id,team\n2026-11-16T10:00:00+01:00,77,ops\n")
    result = ingest(config)
    assert result.slurm_jobs == 3
    assert ", 3 Slurm jobs" in str(result)
    assert rows(config, "select * from slurm_jobs order by source_file, job_id") == [
        ("77", None, None, None, None, None, None, "ops", None, None, utc(2026, 11, 16, 9),
         None, None, "raw/jobs/site.csv"),
        ("4242", None, "c1", "alice", "cv-lab", "gpu", "COMPLETED", "vision", 2, ["h1", "h2"],
         utc(2026, 11, 16, 8), utc(2026, 11, 16, 9), None, "raw/jobs/slurm-c1-2026-11-16.csv"),
        ("4243_1", "4250", "c1", "bob", "asr", "gpu", "RUNNING", None, 1, ["h1"],
         utc(2026, 11, 16, 8) + dt.timedelta(minutes=30), None, None,
         "raw/jobs/slurm-c1-2026-11-16.csv"),
    ]  # fmt: skip
    assert not ingest(config).references_changed


def test_a_job_file_is_read_again_only_when_changed_and_replaces_its_own_rows(
    config: Config,
) -> None:
    path = write(config, "raw/jobs/slurm-c1-2026-11-16.csv", JOBS)
    write(config, "raw/jobs/slurm-c1-2026-11-17.csv", JOBS.replace("-16T", "-17T"))
    ingest(config)
    assert len(rows(config, JOB_TEAMS)) == 4
    # same size and mtime: not read again (as an allocation file)
    _rewrite_keeping_size_and_mtime(path, "vision", "vizion")
    assert read_references(config, known=published_allocation_files(config)).jobs == ()
    assert not ingest(config).references_changed
    assert rows(config, JOB_TEAMS)[0] == ("4242", "vision", ["h1", "h2"])
    # an import updates the file: its rows are replaced, the other file's kept
    write(config, "raw/jobs/slurm-c1-2026-11-16.csv", JOBS.replace(",,1,h1,", ",speech,1,h1,"))
    assert ingest(config).references_changed
    assert [team for _, team, _ in rows(config, JOB_TEAMS)] == [
        "vision",
        "speech",
        "vision",
        None,
    ]
    (config.data_dir / "raw/jobs/slurm-c1-2026-11-17.csv").unlink()
    assert ingest(config).references_changed
    assert len(rows(config, JOB_TEAMS)) == 2
    assert rows(config, "select path from build_state.allocation_files order by 1") == [
        ("raw/allocations/slurm-2026-11-16.csv",),
        ("raw/jobs/slurm-c1-2026-11-16.csv",),
    ]


def test_the_importers_job_file_is_what_ingest_reads(config: Config) -> None:
    """`gpufleet import slurm` writes raw/jobs/ in the format ingest reads."""
    from gpufleet.integrations.slurm import import_slurm

    fixtures = Path(__file__).parent / "slurm_fixtures"
    import_slurm(
        config,
        sacct_json=fixtures / "sacct-22.05.json",
        squeue_json=fixtures / "squeue-22.05.json",
    )
    ingest(config)
    assert rows(
        config,
        "select job_id, job_id_raw, team, hosts, end_ts is null from slurm_jobs"
        " order by start_ts, 1",
    ) == [
        ("1", "1", "vision", ["gpu-node01"], False),
        ("2", "2", "speech", ["gpu-node01"], True),
        ("3", "3", "speech", ["gpu-node01"], False),
        ("4_0", "6", "vision", ["gpu-node02"], True),
        ("4_1", "4", "vision", ["gpu-node02"], True),
        ("5", "5", "speech", ["gpu-node01", "gpu-node02"], True),
    ]
