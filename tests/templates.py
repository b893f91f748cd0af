"""Data directories made once per test process and copied for each test that starts from
one: simulating, ingesting and building a fleet takes seconds, copying its folder
milliseconds. (tests/test_models_fixtures.py's `built_once` does the same for the in-memory
fleets of the model tests.)"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

_MADE: dict[str, Path] = {}
_MADE_DIR = Path(tempfile.mkdtemp(prefix="gpufleet-templates-"))
atexit.register(shutil.rmtree, _MADE_DIR, ignore_errors=True)


def made_once(name: str, fill: Callable[[Path], object], to: Path) -> Path:
    """`to`, a copy of the folder `fill(folder)` fills: that runs once per test process (a
    pytest-xdist worker) under `name`, in a folder of its own, and each call copies it.
    The copy keeps modification times and hard links (the warehouse file and its slot are
    one file), so a test cannot tell it from the folder `fill` made; `fill` must write
    nothing that names its folder (a configuration file with `data_dir`: write it again
    in the copy)."""
    if name not in _MADE:
        folder = Path(tempfile.mkdtemp(dir=_MADE_DIR))
        fill(folder)
        _MADE[name] = folder
    _copy_keeping_links(_MADE[name], to)
    return to


def _copy_keeping_links(source: Path, to: Path) -> None:
    copied: dict[tuple[int, int], str] = {}

    def copy(src: str, dst: str) -> str:
        stat = os.stat(src)
        key = (stat.st_dev, stat.st_ino)
        if stat.st_nlink > 1 and key in copied:
            os.link(copied[key], dst)
        else:
            shutil.copy2(src, dst)
            copied[key] = dst
        return dst

    shutil.copytree(source, to, copy_function=copy, dirs_exist_ok=True)
