"""Fuzzing the configuration file (TOML): every known key with values of any type and
size, unknown sections and keys, sites, and text that is not TOML at all. Loading it
gives a configuration or one GpufleetError naming the file; `gpufleet status` over it
exits 0, or 1 with one line naming the file, and writes nothing outside the data
directory."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.config import load_config
from gpufleet.config.load import _SCHEMA
from gpufleet.errors import GpufleetError
from tests.fuzzing import (
    CELLS,
    assert_kept,
    examples,
    file_bytes,
    run_cli,
    scratch,
    tree,
    written_outside,
)

SCALARS = st.one_of(
    st.sampled_from(CELLS),
    st.sampled_from(
        [
            "UTC",
            "Europe/Berlin",
            "Mars/Olympus",
            "../../etc/localtime",
            "s3://fleet/raw",
            "s3://fleet/../x",
            "s3://Fleet",
            "http://127.0.0.1:1",
            "local:0",
            "tcp://x:1",
            "account",
            "namespace",
            "2026-11-01",
        ]
    ),
    st.text(max_size=10),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, -1, 1, 2**31, 65536]),
    st.floats(),
    st.booleans(),
    st.datetimes(timezones=st.none() | st.just(dt.UTC)),
    st.dates(),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3))


def toml_value(value: Any) -> str:
    """`value` as a TOML literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return json.dumps(value)  # a basic string: JSON's escapes are TOML's


def toml_key(key: str) -> str:
    return key if key.replace("_", "a").isalnum() and key.isascii() else json.dumps(key)


@st.composite
def config_texts(draw: st.DrawFn) -> str:
    """A configuration file: a few known keys (now and then an unknown one) with values of
    any type, in their sections, and now and then a site's table."""
    sections: dict[str | None, list[str]] = {}
    for _ in range(draw(st.integers(0, 5))):
        section = draw(st.sampled_from(list(_SCHEMA)))
        key = draw(st.one_of(st.sampled_from(list(_SCHEMA[section])), st.text(max_size=6)))
        if key:
            line = f"{toml_key(key)} = {toml_value(draw(VALUES))}"
            sections.setdefault(section, []).append(line)
    lines = sections.pop(None, [])
    for section, entries in sections.items():
        lines += [f"[{section}]", *entries]
    if draw(st.booleans()):
        site = draw(st.sampled_from(["nyc", "", "a b", "x\u2028", "../up"]))
        key = draw(st.sampled_from(["timezone", "raw_location", "other"]))
        lines += [f"[clusters.{toml_key(site)}]", f"{key} = {toml_value(draw(VALUES))}"]
    return "\n".join(lines) + "\n"


texts = st.one_of(config_texts(), config_texts(), st.text(max_size=40))


@given(content=file_bytes(texts))
@examples(200)
def test_a_configuration_loads_or_names_its_file(content: bytes) -> None:
    with scratch() as folder:
        path = folder / "gpufleet.toml"
        path.write_bytes(content)
        try:
            load_config(config_path=path, data_dir=folder / "data", environ={})
        except GpufleetError as exc:
            assert str(exc).startswith(str(path)), exc


@given(content=file_bytes(texts))
@examples(20)
def test_status_over_any_configuration_runs_or_names_the_file(content: bytes) -> None:
    with scratch() as root:
        data_dir = root / "data"
        data_dir.mkdir()
        path = data_dir / "gpufleet.toml"
        path.write_bytes(content)
        before = tree(root)
        outcome = run_cli(["--data-dir", str(data_dir), "status"])
        assert_kept(outcome, names=(str(path),))
        assert not written_outside(root, data_dir, before)


def test_a_configuration_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    """Found by the fuzz tests above: UnicodeDecodeError escaped as a traceback."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "gpufleet.toml").write_bytes(b'timezone = "\xff"\n')
    outcome = run_cli(["--data-dir", str(data_dir), "status"])
    assert outcome.status == 1
    assert (
        outcome.stderr
        == f"gpufleet: error: {data_dir / 'gpufleet.toml'}: not UTF-8 text (invalid start byte)\n"
    )
