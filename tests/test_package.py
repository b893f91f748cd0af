"""`pip install gpufleet` installs one name; the collector alone needs two packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINKED = ("collectors", "flows", "reports", "sql")  # top-level folders linked into gpufleet/


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("gpufleet", *LINKED):
        shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    [built] = out.glob("gpufleet-*.whl")
    return zipfile.ZipFile(built)


def test_the_links_inside_the_package_point_at_the_top_level_folders() -> None:
    for name in LINKED:
        link = REPO / "gpufleet" / name
        assert link.is_symlink() and link.resolve() == (REPO / name).resolve(), name


@pytest.mark.slow
def test_the_wheel_adds_exactly_one_top_level_name(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"gpufleet"}
    for name in LINKED:
        assert any(n.startswith(f"gpufleet/{name}/") for n in names), name
    assert "gpufleet/sql/marts/team_daily.sql" in names
    assert "gpufleet/sql/marts/_docs.toml" in names
    assert "gpufleet/reports/templates/page.html" in names
    assert "gpufleet/collectors/nvml.py" in names


@pytest.mark.slow
def test_a_plain_install_pulls_only_nvidia_ml_py_pyarrow_shtab_ijson_and_msgspec(
    wheel: zipfile.ZipFile,
) -> None:
    [metadata] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    message = Parser().parsestr(wheel.read(metadata).decode())
    required = message.get_all("Requires-Dist") or []
    plain = sorted(
        r.split(">")[0].split("=")[0].split("<")[0].strip() for r in required if "extra ==" not in r
    )
    # shtab: `gpufleet completion`; ijson: `gpufleet import slurm` (sacct's JSON as a stream);
    # msgspec: `gpufleet import prometheus` (range-query answers decoded typed)
    assert plain == ["ijson", "msgspec", "nvidia-ml-py", "pyarrow", "shtab"]
