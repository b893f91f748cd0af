"""The Vega bundle the page inlines, made once per vl-convert version and kept on disk
(reports/disk_cache.py): read back in a fresh process, made again when its file is not whole,
and the page the same bytes with the cache or without it."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import vl_convert

from gpufleet.reports import disk_cache, render
from gpufleet.reports.charts import build_charts
from gpufleet.reports.data import load_week
from tests import report_fixtures as fx

_made: list[str] = []  # the real bundle, made once for the module


@pytest.fixture
def bundle_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """vl-convert's javascript_bundle, each call recorded: the first of the module makes
    the real bundle, later ones give the same string (made once: it takes 1.8 CPU s). The
    page's in-process copy is forgotten before and after, as in a fresh process."""
    calls: list[str] = []
    real = vl_convert.javascript_bundle

    def counted(snippet: str, vl_version: str | None = None) -> str:
        calls.append(snippet)
        if not _made:
            _made.append(real(snippet, vl_version))
        return _made[0]

    monkeypatch.setattr(vl_convert, "javascript_bundle", counted)
    render.vega_bundle.cache_clear()
    yield calls
    render.vega_bundle.cache_clear()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(disk_cache.CACHE_DIR_ENV, str(folder))
    return folder


def _entry(folder: Path) -> Path:
    (entry,) = folder.glob("vega-bundle-*")
    return entry


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.slow
def test_a_fresh_process_reads_the_bundle_from_the_cache(
    cache: Path, bundle_calls: list[str]
) -> None:
    """The first render makes the bundle and keeps it; a second process inlines the same
    bytes without calling javascript_bundle (it would fail there)."""
    bundle = render.vega_bundle()
    assert len(bundle_calls) == 1 and _entry(cache).stat().st_size > len(bundle)
    script = textwrap.dedent(
        """
        import hashlib, vl_convert

        def refused(*args, **kwargs):
            raise SystemExit("javascript_bundle called")

        vl_convert.javascript_bundle = refused
        from gpufleet.reports import render
        print(hashlib.sha256(render.vega_bundle().encode()).hexdigest())
        """
    )
    second = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=os.environ.copy()
    )
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == _sha256(bundle)


def _truncated(raw: bytes) -> bytes:
    return raw[: len(raw) // 2]


def _byte_changed(raw: bytes) -> bytes:
    middle = len(raw) // 2
    return raw[:middle] + bytes([raw[middle] ^ 1]) + raw[middle + 1 :]


def _header_only(raw: bytes) -> bytes:
    return raw.partition(b"\n")[0] + b"\n"


def _another_entrys(raw: bytes) -> bytes:
    header, _, content = raw.partition(b"\n")
    magic, _, rest = header.partition(b" ")
    other = hashlib.sha256(b"another key").hexdigest().encode()
    return magic + b" " + other + rest[len(other) :] + b"\n" + content


@pytest.mark.parametrize(
    "spoil",
    [_truncated, _byte_changed, _header_only, _another_entrys, lambda raw: b"", lambda _: b"x"],
    ids=["truncated", "a-byte-changed", "header-only", "another-entrys", "empty", "garbage"],
)
def test_an_entry_that_is_not_whole_is_made_again_and_rewritten(
    cache: Path, bundle_calls: list[str], spoil: Callable[[bytes], bytes]
) -> None:
    bundle = render.vega_bundle()
    entry = _entry(cache)
    whole = entry.read_bytes()
    entry.write_bytes(spoil(whole))
    render.vega_bundle.cache_clear()

    assert render.vega_bundle() == bundle and len(bundle_calls) == 2
    assert entry.read_bytes() == whole
    render.vega_bundle.cache_clear()
    assert render.vega_bundle() == bundle and len(bundle_calls) == 2
    assert [path.name for path in cache.iterdir()] == [entry.name]  # no temporary left


def test_the_page_is_the_same_bytes_with_the_cache_and_without(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bundle_calls: list[str]
) -> None:
    config, _ = fx.fixture_config(tmp_path / "data")
    data = load_week(config, fx.WEEK)
    charts = build_charts(data)
    pages = []
    for setting in ("off", str(tmp_path / "cache"), str(tmp_path / "cache")):
        monkeypatch.setenv(disk_cache.CACHE_DIR_ENV, setting)
        render.vega_bundle.cache_clear()
        pages.append(render.render_page(data, charts).encode("utf-8"))
    assert len(bundle_calls) == 2  # off, then the empty cache; the third read it
    assert pages[0] == pages[1] == pages[2]
    assert pages[0].count(render.vega_bundle().encode("utf-8")) == 1


def test_the_cache_is_in_the_users_cache_folder_unless_set_or_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bundle_calls: list[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv(disk_cache.CACHE_DIR_ENV, raising=False)
    bundle = render.vega_bundle()
    assert _entry(home / ".cache" / "gpufleet")

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(disk_cache.CACHE_DIR_ENV, "")  # empty: as unset
    render.vega_bundle.cache_clear()
    assert render.vega_bundle() == bundle
    assert _entry(tmp_path / "xdg" / "gpufleet")

    monkeypatch.setenv(disk_cache.CACHE_DIR_ENV, "off")
    for _ in range(2):
        render.vega_bundle.cache_clear()
        assert render.vega_bundle() == bundle
    assert len(bundle_calls) == 4
    assert sorted(path.name for path in tmp_path.rglob("vega-bundle-*")) == 2 * [
        _entry(home / ".cache" / "gpufleet").name
    ]


def test_a_cache_that_cannot_be_written_is_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bundle_calls: list[str]
) -> None:
    """The cache folder is a file: the page has its bundle, made each time."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    monkeypatch.setenv(disk_cache.CACHE_DIR_ENV, str(not_a_folder / "cache"))
    first = render.vega_bundle()
    render.vega_bundle.cache_clear()
    assert render.vega_bundle() == first and len(bundle_calls) == 2
    assert not_a_folder.read_text() == ""
