"""A team in ref/hosts.csv that nothing else names (a typo such as `reserch`) is accepted,
with one warning line naming the file, the line and the team."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.config import Config
from gpufleet.warehouse.ingest import ingest

HOSTS = (
    "host_glob,team\n"
    "gpu-vis-*,vision\n"  # users.csv names it
    "gpu-nlp-*,nlp\n"  # teams.csv names it
    "gpu-r01*,reserch\n"  # nothing names it: line 4
    "gpu-sched-*,batch\n"  # only an allocation names it
    "gpu-r02*,reserch\n"  # the same typo again: still one warning
)
ALLOCATIONS = (
    "job_id,user,team,host,gpu_index,start_ts,end_ts\n"
    "7,zoe,batch,gpu-sched-1,0,2026-11-16T08:00:00Z,\n"
)


def _write_refs(config: Config) -> Path:
    ref = config.data_dir / "ref"
    ref.mkdir(parents=True)
    (ref / "users.csv").write_text("user,team\nalice,vision\n", encoding="utf-8")
    (ref / "teams.csv").write_text("team,lead_email\nnlp,nlp-lead@example.org\n", encoding="utf-8")
    (ref / "hosts.csv").write_text(HOSTS, encoding="utf-8")
    allocations = config.data_dir / "raw" / "allocations"
    allocations.mkdir(parents=True)
    (allocations / "slurm-2026-11-16.csv").write_text(ALLOCATIONS, encoding="utf-8")
    return ref / "hosts.csv"


def test_a_team_only_hosts_csv_names_is_one_warning_line(config: Config) -> None:
    hosts = _write_refs(config)
    result = ingest(config)
    expected = (
        f"{hosts}: line 4: team 'reserch' is in neither users.csv, teams.csv nor any "
        "allocation (a typo?)"
    )
    assert result.warnings == (expected,)
    assert str(result).splitlines().count(f"  warning: {expected}") == 1
    assert result.host_rules == 5  # accepted all the same

    # The allocation file is not read again, its team still counts; the typo fixed, no warning.
    assert ingest(config).warnings == (expected,)
    hosts.write_text(HOSTS.replace("reserch", "research"), encoding="utf-8")
    (config.data_dir / "ref" / "users.csv").write_text(
        "user,team\nalice,vision\nrob,research\n", encoding="utf-8"
    )
    assert ingest(config).warnings == ()


def test_the_ingest_command_prints_the_warning(
    config: Config, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gpufleet.flows.server.prefect_server_configured", lambda: False)
    hosts = _write_refs(config)
    assert main(["--data-dir", str(config.data_dir), "ingest"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {hosts}: line 4: team 'reserch' is in neither" in out
