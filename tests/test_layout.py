"""One room per stage: the engine, the simulator and the reports run without Prefect;
flows/ is the thin Prefect layer over them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_collector_imports import imported_top_levels

REPO = Path(__file__).resolve().parents[1]
ENGINE_PACKAGES = ("gpufleet", "reports")


def _modules(package: str) -> list[str]:
    return sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for path in (REPO / package).rglob("*.py")
        if path.name != "__main__.py"  # runs the CLI when imported
    )


def test_no_module_outside_flows_imports_prefect() -> None:
    for package in ENGINE_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            assert "prefect" not in imported_top_levels(path), path.relative_to(REPO)


def test_the_engine_the_simulator_and_the_reports_import_without_prefect() -> None:
    modules = [m for package in ENGINE_PACKAGES for m in _modules(package)]
    assert "gpufleet.warehouse.ingest" in modules and "gpufleet.simulate.fleet" in modules
    code = (
        "import importlib, sys\n"
        "sys.modules['prefect'] = None\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print('ok')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert completed.stdout.strip() == "ok", completed.stderr


def test_every_flow_module_is_a_thin_prefect_layer() -> None:
    for path in (REPO / "flows").glob("*.py"):
        if path.name == "__init__.py":
            continue
        imports = imported_top_levels(path)
        assert "prefect" in imports, f"{path.name} holds no Prefect flow"
        assert "duckdb" not in imports, f"{path.name} queries the warehouse itself"
        assert len(path.read_text().splitlines()) <= 150, f"{path.name} is not thin"
