"""Fuzzing the Slurm import's payloads (`sacct --json`, `squeue --json`, saved to files):
the real fixtures of three releases with fields replaced, removed or cut short. `gpufleet
import slurm --sacct-json F --squeue-json G` exits 0, or 1 with one line naming the file;
it writes nothing outside the data directory, and nothing at all when it fails."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.errors import GpufleetError
from gpufleet.integrations.slurm.hostlist import MAX_HOSTS, expand_hostlist
from gpufleet.integrations.slurm.payload import load_payload
from gpufleet.integrations.slurm.sacct import parse_sacct
from gpufleet.integrations.slurm.squeue import gpu_indices, parse_squeue
from tests.fuzzing import assert_kept, examples, run_cli, scratch, tree, written_outside

FIXTURES = Path(__file__).parent / "slurm_fixtures"
RELEASES = ("22.05", "23.11", "24.11")


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


SACCT = {release: fixture(f"sacct-{release}.json") for release in RELEASES}
SQUEUE = {release: fixture(f"squeue-{release}.json") for release in RELEASES}
# The same as JSON text, which the fuzz tests' examples parse again (faster than a deepcopy).
SACCT_JSON = {release: json.dumps(document) for release, document in SACCT.items()}
SQUEUE_JSON = {release: json.dumps(document) for release, document in SQUEUE.items()}

# Values that no release prints where they land, or prints rarely: times far out of range
# (1e30, 2^63, negative), counts as strings, empty and huge host lists, GRES details with
# ranges that do not read or never end, states of every shape.
VALUES: tuple[Any, ...] = (
    None,
    0,
    -1,
    1,
    2**31,
    2**63,
    2**64,
    -(2**63),
    1e30,
    -1e30,
    1.5,
    float("nan"),
    float("inf"),
    True,
    "",
    " ",
    "1795766053",
    "None assigned",
    "gpu-node[01-02]",
    "gpu-node[01-99999999]",
    "gpu-node[02-01]",
    "gpu-node[²]",
    "n[0-²]",
    "gpu-node01,gpu-node01",
    "../../etc",
    "x\ny",
    "\x00",
    "gpu:a100:2(IDX:0-1)",
    "gpu:1(IDX:²)",
    "gpu:1(IDX:0-99999999999)",
    "gpu:a100_3g.20gb:1(IDX:0)",
    "gpu:2(IDX:1-0)",
    "gpu(CNT:2)",
    "RUNNING",
    ["RUNNING"],
    [],
    [1],
    {},
    {"set": True, "infinite": False, "number": 1e30},
    {"set": True, "infinite": False, "number": 2**63},
    {"set": True, "infinite": False, "number": -5},
    {"set": True, "infinite": False, "number": "7"},
    {"set": True, "infinite": True, "number": 0},
    {"set": False},
    {"type": "gres", "name": "gpu", "count": 2**40},
    [{"type": "gres", "name": "gpu", "count": None}],
    {"data_parser": "v0.0.99"},
    {"description": "boom"},
)
json_values = st.recursive(
    st.one_of(st.sampled_from(VALUES), st.text(max_size=10), st.integers()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node of a JSON document (the root's is ())."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*prefix, index))
    return found


@functools.cache
def _fixture_paths(text: str) -> tuple[tuple[Any, ...], ...]:
    """`_paths` of a fixture's document, found once per fixture."""
    return tuple(_paths(json.loads(text)))


@st.composite
def mutated(draw: st.DrawFn, text: str) -> Any:
    """The JSON document `text` with one to four of its nodes replaced by other values, or
    removed."""
    document = json.loads(text)
    for change in range(draw(st.integers(1, 4))):
        paths = _paths(document) if change else _fixture_paths(text)
        path = draw(st.sampled_from(paths[1:] or [()]))
        if not path:
            return copy.deepcopy(draw(json_values))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(draw(json_values))  # VALUES' own stay as they are
    return document


@st.composite
def payload_texts(draw: st.DrawFn, fixtures: dict[str, str]) -> str:
    """A saved output: a release's fixture, mutated; now and then cut short or not JSON."""
    text = json.dumps(draw(mutated(fixtures[draw(st.sampled_from(RELEASES))])))
    shape = draw(st.integers(0, 9))
    if shape == 0:
        return text[: draw(st.integers(0, len(text)))]
    if shape == 1:
        return draw(st.text(max_size=40))
    return text


@given(sacct=payload_texts(SACCT_JSON), squeue=payload_texts(SQUEUE_JSON))
@examples(150)
def test_each_payload_parses_or_fails_naming_its_source(sacct: str, squeue: str) -> None:
    for text, parse in ((sacct, parse_sacct), (squeue, parse_squeue)):
        try:
            parse(load_payload(text, source="saved.json"))
        except GpufleetError as exc:
            assert str(exc).startswith("saved.json: ") or "host list" in str(exc), exc


@given(sacct=payload_texts(SACCT_JSON), squeue=st.none() | payload_texts(SQUEUE_JSON))
@examples(15)
def test_import_slurm_writes_its_files_or_fails_in_one_line(sacct: str, squeue: str | None) -> None:
    with scratch() as root:
        data_dir = root / "data"
        (root / "sacct.json").write_text(sacct)
        argv = [
            "--data-dir",
            str(data_dir),
            "import",
            "slurm",
            "--sacct-json",
            str(root / "sacct.json"),
        ]
        if squeue is not None:
            (root / "squeue.json").write_text(squeue)
            argv += ["--squeue-json", str(root / "squeue.json")]
        before = tree(root)
        outcome = run_cli(argv)
        assert_kept(outcome, names=("sacct.json", "squeue.json", "host list"))
        assert not written_outside(root, data_dir, before)
        if outcome.status != 0:
            assert not data_dir.exists() or not any(data_dir.rglob("*.csv")), outcome
            return
        # What it wrote, ingest reads.
        ingested = run_cli(["--data-dir", str(data_dir), "ingest"])
        assert ingested.status == 0, ingested


@pytest.mark.parametrize(
    "hostlist", ["n[²]", "n[0-²]", "n[0-99999999]", "n[0-60000],m[0-60000]", "r[0-999]n[0-999]"]
)
def test_a_host_list_that_does_not_read_or_never_ends_is_one_line(hostlist: str) -> None:
    """Found by the fuzz tests: '²' passed str.isdigit() and failed int() (a traceback), and
    a range of a hundred million names took the importer's memory."""
    with pytest.raises(GpufleetError, match=r"^host list "):
        expand_hostlist(hostlist)
    assert len(expand_hostlist(f"n[1-{MAX_HOSTS}]")) == MAX_HOSTS


def test_the_fixtures_import_as_they_are(tmp_path: Path) -> None:
    """The unmutated payloads: the fuzz tests' starting point imports cleanly."""
    for release in RELEASES:
        sacct, squeue = tmp_path / f"sacct-{release}.json", tmp_path / f"squeue-{release}.json"
        sacct.write_text(json.dumps(SACCT[release]))
        squeue.write_text(json.dumps(SQUEUE[release]))
        data_dir = tmp_path / release
        argv = ["--data-dir", str(data_dir), "import", "slurm", "--sacct-json", str(sacct)]
        outcome = run_cli([*argv, "--squeue-json", str(squeue)])
        assert outcome.status == 0, outcome
        assert any((data_dir / "raw" / "allocations").glob("*.csv"))


@pytest.mark.parametrize("errors", [{"description": "boom"}, 5, "boom"])
def test_errors_of_another_shape_than_a_list_are_one_line(errors: object) -> None:
    """Found by the fuzz tests: `errors` as an object or a number raised KeyError/TypeError."""
    text = json.dumps(SACCT["22.05"] | {"errors": errors})
    with pytest.raises(GpufleetError, match=r"^saved\.json: Slurm reported an error: "):
        load_payload(text, source="saved.json")


@pytest.mark.parametrize(
    ("detail", "indices"),
    [("gpu:1(IDX:²)", ()), ("gpu:1(IDX:0-²)", ()), ("gpu:2(IDX:65534-99999999999)", ())],
)
def test_gpu_indices_that_do_not_read_are_skipped(detail: str, indices: tuple[int, ...]) -> None:
    """Found by the fuzz tests: '²' passed str.isdigit() and failed int(), and a range of a
    hundred billion indices took the importer's memory."""
    assert gpu_indices(detail) == (indices, False)
    assert gpu_indices("gpu:2(IDX:65534-70000)") == ((65534, 65535), False)
