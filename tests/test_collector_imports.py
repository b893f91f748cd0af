"""The collector runs on GPU hosts with only `pip install gpufleet`: stdlib, pynvml, pyarrow."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ALLOWED_THIRD_PARTY = {"pynvml", "pyarrow"}
PROJECT = {"collectors", "gpufleet"}


def imported_top_levels(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_collector_modules_import_only_the_stdlib_pynvml_and_pyarrow():
    modules = sorted((REPO / "collectors").glob("*.py"))
    assert len(modules) >= 6
    for path in modules:
        foreign = {
            name
            for name in imported_top_levels(path)
            if name not in sys.stdlib_module_names
            and name not in ALLOWED_THIRD_PARTY | PROJECT
            and name != "__future__"
        }
        assert foreign == set(), f"{path.name} imports {foreign}"


def test_gpufleet_collect_needs_no_pipeline_package():
    # Hide the pipeline's packages, as on a GPU host, and load the collect command's modules.
    code = (
        "import sys\n"
        "for name in ('duckdb', 'prefect', 'polars', 'altair', 'numpy', 'jinja2'):\n"
        "    sys.modules[name] = None\n"
        "import gpufleet.collectors.collect, gpufleet.cli\n"
        "print('ok')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert completed.stdout.strip() == "ok", completed.stderr
