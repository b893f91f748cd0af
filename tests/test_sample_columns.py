"""The sample columns have one source, the collectors' schema (`collectors/schema.py`): the
warehouse's table takes its columns and types from it, and a new column is one field there
plus, for a measured number, one line of `ingest/values.py`'s table of valid values (and
its comment in `sql/marts/_docs.toml`, and the SQL of the models that use it)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa

import gpufleet
from gpufleet.collectors.schema import REQUIRED_COLUMNS, SAMPLE_SCHEMA
from gpufleet.warehouse.base.raw_tables import SAMPLE_COLUMNS, ensure_raw_tables
from gpufleet.warehouse.ingest.values import VALUE_RANGES

# Numbers that name or flag rather than measure: no range of valid values.
UNRANGED_NUMBERS = {"gpu_index", "clock_event_mask"}


def test_the_table_holds_the_schemas_columns_as_duckdb_reads_them() -> None:
    with duckdb.connect() as con:
        ensure_raw_tables(con)
        table = con.execute("describe samples_stored").fetchall()
        read = con.from_arrow(SAMPLE_SCHEMA.empty_table())
        expected = [
            (name, str(kind), "NO" if name in REQUIRED_COLUMNS else "YES")
            for name, kind in zip(read.columns, read.types, strict=True)
        ]
        view = [row[:2] for row in con.execute("describe samples").fetchall()]
    assert [row[:3] for row in table] == [*expected, ("load_id", "BIGINT", "NO")]
    assert view == [row[:2] for row in expected]
    assert [name for name, _ in SAMPLE_COLUMNS] == SAMPLE_SCHEMA.names


def test_every_measured_number_has_a_range_of_valid_values() -> None:
    numbers = {
        field.name
        for field in SAMPLE_SCHEMA
        if pa.types.is_integer(field.type) or pa.types.is_floating(field.type)
    }
    ranged = [rule.column for rule in VALUE_RANGES]
    assert len(ranged) == len(set(ranged))
    assert set(ranged) <= set(SAMPLE_SCHEMA.names)
    assert set(ranged) == numbers - UNRANGED_NUMBERS


def test_no_module_of_the_warehouse_lists_the_sample_columns_again() -> None:
    """Only the table of valid values names most sample columns; any other list of them
    would be a second one to keep."""
    names = set(SAMPLE_SCHEMA.names)
    warehouse = Path(gpufleet.__file__).parent / "warehouse"
    listing = []
    for path in sorted(warehouse.rglob("*.py")):
        tree = ast.parse(path.read_text())
        named = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        if len(named & names) >= len(names) // 2:
            listing.append(path.relative_to(warehouse).as_posix())
    assert listing == ["ingest/values.py"]


# Run in a process of its own: the schema and the table of valid values each gain one line
# before anything of the warehouse is imported, the samples' column comments
# (sql/marts/_docs.toml) one more.
NEW_COLUMN = r"""
import datetime as dt
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import gpufleet

root = Path(gpufleet.__file__).parent


def with_line(name, relative, after, line):
    path = root / relative
    source = path.read_text()
    assert source.count(after) == 1, after
    module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(name, path))
    sys.modules[name] = module
    exec(compile(source.replace(after, after + line), str(path), "exec"), module.__dict__)


with_line(
    "gpufleet.collectors.schema",
    "collectors/schema.py",
    'pa.field("mig_slice_fraction", pa.float32()),\n',
    '    pa.field("fan_speed_pct", pa.float32()),\n',
)
with_line(
    "gpufleet.warehouse.ingest.values",
    "warehouse/ingest/values.py",
    "VALUE_RANGES: tuple[ValueRange, ...] = (\n",
    '    ValueRange("fan_speed_pct", 0.0, 100.0),\n',
)

import duckdb

import gpufleet.warehouse.build.models as models
from gpufleet.collectors.schema import SAMPLE_SCHEMA, file_metadata
from gpufleet.config import Config
from gpufleet.warehouse.ingest import ingest

original_docs = models.shared_docs


def shared_docs(sql_dir=models.SQL_DIR):  # and its line of sql/marts/_docs.toml
    docs = dict(original_docs(sql_dir))  # read-only: the samples' entry, a changed copy
    fan = {"fan_speed_pct": "The fans' speed, percent of their maximum."}
    docs["samples"] = {**docs["samples"], "columns": {**docs["samples"]["columns"], **fan}}
    return docs


models.shared_docs = shared_docs

T0 = dt.datetime(2026, 11, 16, 9, tzinfo=dt.UTC)


def write(data_dir, relative, fan):
    rows = [
        {"ts": T0 + dt.timedelta(seconds=10 * n), "interval_s": 10.0, "host": "h1",
         "gpu_index": 0, "gpu_uuid": "GPU-a", "status": "ok", "fan_speed_pct": value}
        for n, value in enumerate(fan)
    ]
    path = data_dir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, SAMPLE_SCHEMA.with_metadata(file_metadata())), path)


found = {}
for compact in (False, True):
    data_dir = Path(sys.argv[1]) / f"compact-{compact}"
    write(data_dir, "raw/samples/date=2026-11-16/host=h1/a.parquet", [40.0, 45.5])
    write(data_dir, "raw/samples/date=2026-11-16/host=h2/b.parquet", [40.0, 150.0])
    config = Config(data_dir=data_dir)
    with warnings.catch_warnings(record=True):
        result = ingest(config, compact=compact, today=dt.date(2026, 11, 20))
    with duckdb.connect(str(config.warehouse_path), read_only=True) as con:
        values = con.execute("select fan_speed_pct from samples order by ts").fetchall()
    found[str(compact)] = {
        "values": [value for (value,) in values],
        "quarantined": [q.reason for q in result.quarantined],
    }
print(json.dumps(found))
"""


def test_a_new_column_is_a_line_of_the_schema_and_one_of_the_valid_values(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", NEW_COLUMN, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    reason = "column fan_speed_pct: value 150.0 is out of range (0 to 100)"
    for compact in ("False", "True"):  # in samples_stored; compacted, in the lake
        assert found[compact] == {"values": [40.0, 45.5], "quarantined": [reason]}, compact
