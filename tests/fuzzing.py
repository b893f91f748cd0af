"""What the fuzz tests (tests/test_fuzz_*.py) share: their hypothesis settings, the one
invariant every parser of outside input keeps, and running the real command in-process.

The invariant: a command exits 0 with its result, or exits 1 with one line on stderr,
`gpufleet: error: ...`, that names the input; a function returns, or raises the project's
`GpufleetError`. Never a traceback, never a write outside the data directory.

Two hypothesis profiles: `ci` (the default, `make test`) runs each test's few examples
from a fixed seed, so that the suite stays fast and a failure shows again on every run;
`fuzz` (`make fuzz`, HYPOTHESIS_PROFILE=fuzz) runs `FUZZ_FACTOR` times as many, randomly.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st

from gpufleet.cli import main

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
FUZZ_FACTOR = 50
# deadline None: an example's time is the machine's (two shared cores), not the code's.
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("fuzz", derandomize=False, database=None, deadline=None)
if PROFILE not in ("ci", "fuzz"):
    raise ValueError(f"HYPOTHESIS_PROFILE must be ci or fuzz, not {PROFILE!r}")
settings.load_profile(PROFILE)


def examples(count: int) -> settings:
    """A test's settings: `count` examples in `make test`, FUZZ_FACTOR times as many in
    `make fuzz`."""
    scale = FUZZ_FACTOR if PROFILE == "fuzz" else 1
    return settings(settings.get_profile(PROFILE), max_examples=count * scale)


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str


def run_cli(argv: Sequence[str]) -> Outcome:
    """`gpufleet <argv>` in this process (the real entry function), its exit status and
    output; an exception other than SystemExit escapes, failing the test with its traceback."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse's own refusals
            status = exc.code if isinstance(exc.code, int) else 1
    return Outcome(status, out.getvalue(), err.getvalue())


def assert_kept(outcome: Outcome, *, names: Sequence[str] = ()) -> None:
    """The invariant: exit 0, or exit 1 with one error line (naming one of `names`, when
    given); never a traceback."""
    assert "Traceback" not in outcome.stderr, outcome.stderr
    if outcome.status == 0:
        return
    assert outcome.status == 1, outcome
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("gpufleet: error:")]
    assert len(errors) == 1, outcome.stderr
    assert errors[0] == outcome.stderr.rstrip("\n").splitlines()[-1], outcome.stderr
    if names:
        assert any(name in errors[0] for name in names), (errors[0], names)


@contextlib.contextmanager
def scratch(prefix: str = "gpufleet-fuzz-") -> Iterator[Path]:
    """A fresh directory for one example (a test's tmp_path is shared by all its examples)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        yield Path(folder)


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder below `root`: (size, mtime in ns) by relative path."""
    listing = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        listing[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return listing


def written_outside(root: Path, data_dir: Path, before: dict[str, tuple[int, int]]) -> list[str]:
    """What changed below `root` but outside `data_dir` since `before` (`tree(root)`)."""
    inside = data_dir.relative_to(root).as_posix()
    after = tree(root)
    return sorted(
        name
        for name in before.keys() | after.keys()
        if before.get(name) != after.get(name)
        and name != inside
        and not name.startswith(inside + "/")
    )


# Cells that have broken parsers before, or could: empty and blank, quotes and separators,
# control characters and line breaks, numbers at and past their limits, times with and
# without an offset, far in the past and the future, digits that are not ASCII.
CELLS = (
    "",
    " ",
    '"',
    ",",
    ";",
    "\n",
    "\r",
    "\r\n",
    "\x00",
    "\x1b[31m",
    "\u2028",
    "\ufeff",
    "é",
    "*",
    "?",
    "[",
    "../x",
    "/etc/passwd",
    "=1+1",
    "0",
    "-1",
    "1.5",
    "65535",
    "65536",
    "2147483648",
    "9223372036854775808",
    "1e309",
    "nan",
    "inf",
    "-0",
    "٣",
    "²",
    "0x10",
    "2026-11-16",
    "2026-11-16T09:00:00Z",
    "2026-11-16T09:00:00+01:00",
    "2026-11-16T09:00:00",
    "2026-11-16T08:00:00+00:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59+00:00",
    "1969-12-31T23:59:59Z",
    "2026-02-30T00:00:00Z",
    "2026-11-16T09:00:00+25:00",
    "alice",
    "vision",
    "node-1",
    "NVIDIA H100*",
    "a@b.example",
    "a@b.example; c@d.example",
    "not an address",
)


def cells() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(CELLS), st.text(max_size=12))


@st.composite
def csv_texts(draw: st.DrawFn, columns: Sequence[str], optional: Sequence[str] = ()) -> str:
    """The text of a CSV file meant to have `columns` (and some of `optional`): mostly a
    right header, in any order, sometimes a wrong one; rows of interesting cells, most of
    the header's width; written by csv.writer or joined by hand (unbalanced quotes)."""
    header = list(columns) + draw(st.lists(st.sampled_from(list(optional) or [""]), unique=True))
    header = [name for name in draw(st.permutations(header)) if name]
    if draw(st.integers(0, 9)) == 0:
        header = draw(st.lists(st.one_of(st.sampled_from(list(columns)), cells()), max_size=8))
    rows = draw(
        st.lists(
            st.one_of(
                st.lists(cells(), min_size=len(header), max_size=len(header)),
                st.lists(cells(), max_size=len(header) + 2),
            ),
            max_size=6,
        )
    )
    if draw(st.booleans()):
        out = io.StringIO()
        writer = csv.writer(out, lineterminator=draw(st.sampled_from(("\n", "\r\n"))))
        writer.writerow(header)
        writer.writerows(rows)
        return out.getvalue()
    return "\n".join(",".join(row) for row in [header, *rows]) + draw(st.sampled_from(("", "\n")))


def file_bytes(texts: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """A file's bytes: the text as UTF-8 (sometimes with a BOM), or with bytes that are
    not UTF-8, or cut short in the middle."""
    return st.one_of(
        texts.map(lambda text: text.encode("utf-8")),
        texts.map(lambda text: b"\xef\xbb\xbf" + text.encode("utf-8")),
        st.tuples(texts, st.binary(min_size=1, max_size=8)).map(
            lambda pair: pair[0].encode("utf-8") + b"\xff" + pair[1]
        ),
        st.tuples(texts, st.integers(0, 200)).map(lambda pair: pair[0].encode()[: pair[1]]),
    )
