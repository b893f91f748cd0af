"""The Prometheus importer's parts without a server: its configuration, ref/namespaces.csv,
the PromQL it sends, allocation rows joined across windows, and the imported spans."""

from __future__ import annotations

import datetime as dt
import itertools
import re
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gpufleet.config import DEFAULT_PROMETHEUS_SERIES, PrometheusConfig, load_config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.prometheus.files import (
    ImportedWindows,
    allocation_files,
    merged,
    rows_by_date,
    rows_by_host,
)
from gpufleet.integrations.prometheus.pods import (
    PodAllocation,
    namespace_team,
    read_namespaces,
)
from gpufleet.integrations.prometheus.points import all_points
from gpufleet.integrations.prometheus.queries import (
    HOSTS_PATTERN_CHARS,
    HOSTS_PER_QUERY,
    METRICS,
    host_batches,
    step_query,
)
from gpufleet.integrations.prometheus.samples import HostSteps, gpu_of


def config_from(tmp_path: Path, text: str):
    (tmp_path / "gpufleet.toml").write_text(text)
    return load_config(data_dir=tmp_path, environ={})


def test_every_configurable_series_has_a_metric_and_back() -> None:
    assert [m.column for m in METRICS] == [column for column, _ in DEFAULT_PROMETHEUS_SERIES]


def test_prometheus_and_kubernetes_settings_are_read(tmp_path: Path) -> None:
    config = config_from(
        tmp_path,
        '[prometheus]\nurl = "http://prom:9090"\nstep_seconds = 30\nwindow_minutes = 30\n'
        'host_label = "node"\n[prometheus.series]\ngpu_util_pct = "gpu_util"\n'
        'clock_event_mask = ["a", "b"]\n'
        '[kubernetes]\nteam_from = "label_team"\nnamespace_label = "exported_namespace"\n'
        'user_label = "label_user"\n',
    )
    assert config.prometheus.url == "http://prom:9090"
    assert config.prometheus.step_seconds == 30 and config.prometheus.host_label == "node"
    assert config.prometheus.series_names("gpu_util_pct") == ("gpu_util",)
    assert config.prometheus.series_names("clock_event_mask") == ("a", "b")
    assert config.prometheus.series_names("power_w") == ("DCGM_FI_DEV_POWER_USAGE",)
    assert config.kubernetes.team_from == "label_team"
    assert config.kubernetes.namespace_label == "exported_namespace"
    assert config.kubernetes.user_label == "label_user"
    assert load_config(data_dir=tmp_path / "none", environ={}).kubernetes.team_from == "namespace"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[prometheus]\nurl = "prom:9090"\n', "line 2: 'prometheus.url' is not an http(s) URL"),
        ("[prometheus]\nstep_seconds = 0\n", "line 2: 'prometheus.step_seconds' must be >= 1"),
        (
            "[prometheus]\nstep_seconds = 7\n",
            "'prometheus.window_minutes' must be >= 1 and a whole number of steps (7 s)",
        ),
        ("[prometheus]\nwindow_minutes = 100000\n", "more than 11000 steps"),
        ('[prometheus]\nuuid_label = "my-uuid"\n', "'prometheus.uuid_label' is not a label"),
        ('[prometheus]\nmig_instance_label = "GPU I"\n', "'prometheus.mig_instance_label' is"),
        ("[prometheus]\nport = 1\n", "line 2: unknown key 'prometheus.port'"),
        ('[prometheus.series]\ngpu_util = "x"\n', "line 2: unknown key 'prometheus.series."),
        ("[prometheus.series]\npower_w = []\n", "line 2: 'prometheus.series.power_w' must be"),
        ('[prometheus.series]\npower_w = "a b"\n', "'prometheus.series.power_w' must be a"),
        ('[kubernetes]\nteam_from = "team label"\n', "line 2: 'kubernetes.team_from' is not"),
        ("[kubernetes]\npod_label = 3\n", "line 2: 'kubernetes.pod_label' must be a label name"),
    ],
)
def test_bad_settings_fail_in_one_line_naming_file_and_line(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(GpufleetError) as failure:
        config_from(tmp_path, text)
    message = str(failure.value)
    assert "\n" not in message and str(tmp_path / "gpufleet.toml") in message
    assert problem in message


def test_a_mean_is_over_every_series_of_a_gpu_in_the_step_and_one_ms_short() -> None:
    gauge = next(m for m in METRICS if m.column == "power_w")
    counter = next(m for m in METRICS if m.column == "energy_mj")
    settings = PrometheusConfig(step_seconds=30)
    assert step_query(gauge, "P", hosts=['a"b'], prometheus=settings) == (
        'sum by (Hostname, UUID, gpu, modelName) (sum_over_time(P{Hostname="a\\"b"}[29999ms]))'
        ' / sum by (Hostname, UUID, gpu, modelName) (count_over_time(P{Hostname="a\\"b"}'
        "[29999ms]))"
    )
    assert step_query(counter, "E", hosts=["h"], prometheus=settings) == (
        'max by (Hostname, UUID, gpu, modelName) (last_over_time(E{Hostname="h"}[29999ms]))'
    )


def test_a_query_asks_for_a_batch_of_hosts_by_a_regex_of_their_escaped_names() -> None:
    """Several hosts: one regex of their names, each escaped (a name is matched whole, as it
    is: "n.1" is not "nx1", "a|b" not "a"); at most HOSTS_PER_QUERY a batch, and a batch's
    regex at most HOSTS_PATTERN_CHARS long, one long name a batch of its own."""
    power = next(m for m in METRICS if m.column == "power_w")
    settings = PrometheusConfig(step_seconds=30)
    assert step_query(power, "P", hosts=["n.1", "a|b", 'q"'], prometheus=settings) == (
        "sum by (Hostname, UUID, gpu, modelName) "
        '(sum_over_time(P{Hostname=~"n\\\\.1|a\\\\|b|q\\""}[29999ms])) / '
        "sum by (Hostname, UUID, gpu, modelName) "
        '(count_over_time(P{Hostname=~"n\\\\.1|a\\\\|b|q\\""}[29999ms]))'
    )
    hosts = [f"node{i:03d}" for i in range(HOSTS_PER_QUERY * 2 + 1)]
    assert list(host_batches(hosts)) == [
        hosts[:HOSTS_PER_QUERY],
        hosts[HOSTS_PER_QUERY:-1],
        hosts[-1:],
    ]
    long = "x" * HOSTS_PATTERN_CHARS
    assert list(host_batches(["a", long, "b", "c"])) == [["a"], [long], ["b", "c"]]


def test_a_mig_devices_own_columns_are_grouped_by_its_labels_and_xids_are_new_codes() -> None:
    """Memory, utilization and SM activity are a MIG device's own (grouped by GPU_I_ID and
    GPU_I_PROFILE too); power and health are its GPU's. An XID query gives, per step, each
    code its scrapes show unless the GPU showed it at the end of the step before, and a
    series without a code whenever the step has a scrape."""
    settings = PrometheusConfig(step_seconds=30, mig_instance_label="gi")
    used = next(m for m in METRICS if m.column == "mem_used_bytes")
    xid = next(m for m in METRICS if m.column == "xid_errors")
    by = "by (Hostname, UUID, gpu, modelName, gi, GPU_I_PROFILE)"
    assert step_query(used, "U", hosts=["h"], prometheus=settings) == (
        f'sum {by} (sum_over_time(U{{Hostname="h"}}[29999ms])) / '
        f'sum {by} (count_over_time(U{{Hostname="h"}}[29999ms]))'
    )
    gpu = "by (Hostname, UUID, gpu, modelName)"
    assert step_query(xid, "X", hosts=["h"], prometheus=settings) == (
        f'(count_values {gpu} ("gpufleet_xid", last_over_time(X{{Hostname="h"}}[29999ms])) '
        f'unless count_values {gpu} ("gpufleet_xid", X{{Hostname="h"}} offset 30s)) '
        f'or count {gpu} (last_over_time(X{{Hostname="h"}}[29999ms]))'
    )


@pytest.mark.parametrize(
    ("profile", "model", "fraction"),
    [
        ("1g.10gb", "NVIDIA H100 80GB HBM3", 1 / 7),
        ("3g.40gb", "NVIDIA A100-SXM4-80GB", 3 / 7),
        ("7g.80gb", "NVIDIA H100 80GB HBM3", 1.0),
        ("1g.12gb+me", "NVIDIA H100 NVL", 1 / 7),
        ("2g.12gb", "NVIDIA A30", 2 / 4),
        ("unknown", "NVIDIA H100 80GB HBM3", None),
        (None, "NVIDIA H100 80GB HBM3", None),
    ],
)
def test_a_mig_devices_row_is_named_after_its_gpu_and_instance(
    profile: str | None, model: str, fraction: float | None
) -> None:
    series: dict[str, Any] = {
        "metric": {"Hostname": "h", "UUID": "GPU-1", "gpu": "2", "modelName": model}
        | {"GPU_I_ID": "09"}
        | ({"GPU_I_PROFILE": profile} if profile else {}),
        "values": [],
    }
    gpu = gpu_of(series, prometheus=PrometheusConfig(), query="q")
    assert (gpu.uuid, gpu.parent, gpu.index, gpu.profile) == ("MIG-GPU-1/9", "GPU-1", 2, profile)
    assert gpu.slice_fraction == (None if fraction is None else pytest.approx(fraction))
    series["metric"] = {k: v for k, v in series["metric"].items() if k != "GPU_I_ID"}
    whole = gpu_of(series, prometheus=PrometheusConfig(), query="q")
    assert (whole.uuid, whole.parent, whole.slice_fraction) == ("GPU-1", None, None)


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"GPU_I_ID": "a"}, "GPU GPU-1 has 'GPU_I_ID'='a', not a GPU instance id"),
        ({"gpufleet_xid": "7.5"}, "gpufleet_xid='7.5', not an XID code"),
        ({"gpufleet_xid": "-1"}, "gpufleet_xid='-1', not an XID code"),
    ],
)
def test_a_bad_mig_or_xid_label_fails_naming_the_query(labels: dict, problem: str) -> None:
    xid = next(m for m in METRICS if m.column == "xid_errors")
    series = {"metric": {"Hostname": "h", "UUID": "GPU-1", "gpu": "0"} | labels}
    steps = HostSteps(60, 1_800_000_000, 5)
    with pytest.raises(GpufleetError, match="^" + re.escape(f"query 'q': {problem}")):
        steps.add(
            xid,
            [series | {"values": [[1_800_000_060, "1"]]}],
            query="q",
            prometheus=PrometheusConfig(),
        )


def test_namespaces_csv_teams_by_date(tmp_path: Path) -> None:
    path = tmp_path / "namespaces.csv"
    path.write_text(
        "namespace,team,valid_from\nml,vision,\nml,robotics,2026-11-10\nml,speech,2026-11-20\n"
        "web,frontend,2026-12-01\n"
    )
    rows = read_namespaces(path)
    assert namespace_team("ml", dt.date(2026, 11, 1), rows) == "vision"
    assert namespace_team("ml", dt.date(2026, 11, 10), rows) == "robotics"
    assert namespace_team("ml", dt.date(2026, 11, 25), rows) == "speech"
    assert namespace_team("web", dt.date(2026, 11, 25), rows) is None
    assert namespace_team("other", dt.date(2026, 11, 25), rows) is None
    assert read_namespaces(tmp_path / "missing.csv") == ()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("namespace,owner\nml,vision\n", "line 1: unknown column 'owner'"),
        ("namespace\nml\n", "line 1: needs one column 'team'"),
        ("namespace,team\nml,\n", "line 2: 'team' is empty"),
        (
            "namespace,team\nml,a\nml,b\n",
            "line 3: namespace 'ml' is listed twice (first on line 2)",
        ),
        ("namespace,team,valid_from\nml,a,11/2026\n", "line 2: 'valid_from' is not a date"),
        ("namespace,team\nml,a,b\n", "line 2: expected 2 fields, got 3"),
    ],
)
def test_bad_namespaces_csv_fails_naming_the_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "namespaces.csv"
    path.write_text(text)
    with pytest.raises(GpufleetError, match=f"^{re.escape(f'{path}: {problem}')}"):
        read_namespaces(path)


def _row(job: str, start_min: int, end_min: int) -> PodAllocation:
    base = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    return PodAllocation(
        job,
        None,
        "t",
        "h",
        0,
        base + dt.timedelta(minutes=start_min),
        base + dt.timedelta(minutes=end_min),
    )


def test_a_row_the_previous_window_ended_is_extended_and_a_known_row_not_repeated() -> None:
    existing = [_row("ns/a", 0, 60)]
    assert merged(existing, [_row("ns/a", 60, 90)]) == [_row("ns/a", 0, 90)]
    assert merged(existing, [_row("ns/a", 10, 60)]) == existing  # imported before
    assert merged(existing, [_row("ns/a", 70, 90)]) == [*existing, _row("ns/a", 70, 90)]
    assert merged(existing, [_row("ns/b", 60, 90)]) == [*existing, _row("ns/b", 60, 90)]


def test_merging_a_window_into_a_days_rows_takes_time_in_proportion_to_the_rows() -> None:
    """A day's file of 1,000 GPUs holds thousands of rows, and each window adds one per pod on
    a GPU: a row finds its pod's rows by key, not by a scan of the day's (20,000 x 4,000
    comparisons: seconds)."""
    day = [
        _row(f"ns/p{i}", 60 * hour, 60 * hour + 60)._replace(gpu_index=i)
        for hour in range(5)
        for i in range(4_000)
    ]
    later = [_row(f"ns/p{i}", 300, 360)._replace(gpu_index=i) for i in range(4_000)]
    began = time.process_time()
    rows = merged(day, later)
    assert time.process_time() - began < 2.0
    assert rows == sorted(
        [*day[:-4_000], *(r._replace(end_ts=later[0].end_ts) for r in day[-4_000:])],
        key=lambda r: (r.start_ts, r.host, r.gpu_index, r.gpu_uuid or "", r.job_id),
    )


def test_a_run_over_utc_midnight_is_one_row_a_day_whatever_the_windows(tmp_path: Path) -> None:
    """Windows 23:20-00:20 and 00:20-01:20 of one pod: a row ending at midnight in the first
    day's file and one from midnight to 01:20 in the next day's, not a piece per window."""
    for start, end in itertools.pairwise([23 * 60 + 20, 24 * 60 + 20, 25 * 60 + 20]):
        window = [_row("ns/a", start, end)]
        for path, text in allocation_files(tmp_path, "prom", window).items():
            path.write_text(text)
    rows = {path.name: path.read_text().splitlines()[1:] for path in sorted(tmp_path.glob("*.csv"))}
    assert rows == {
        "prometheus-prom-2026-11-27.csv": [
            "ns/a,,t,h,0,2026-11-27T23:20:00+00:00,2026-11-28T00:00:00+00:00,"
        ],
        "prometheus-prom-2026-11-28.csv": [
            "ns/a,,t,h,0,2026-11-28T00:00:00+00:00,2026-11-28T01:20:00+00:00,"
        ],
    }


def test_imported_spans_are_joined_and_only_the_missing_parts_are_asked(tmp_path: Path) -> None:
    path = tmp_path / "imports" / "prometheus.json"
    spans = ImportedWindows(path)
    assert spans.missing("u", 0, 100) == [(0, 100)]
    spans.add("u", 0, 30)
    spans.add("u", 30, 50)
    spans.add("u", 70, 80)
    again = ImportedWindows(path)
    assert again.of("u") == [(0, 50), (70, 80)]
    assert again.missing("u", 0, 100) == [(50, 70), (80, 100)]
    assert again.missing("u", 10, 40) == []
    assert again.missing("other", 0, 10) == [(0, 10)]
    path.write_text("{not json")
    with pytest.raises(GpufleetError, match="not the record of imported windows"):
        ImportedWindows(path)


def test_serve_imports_from_prometheus_three_minutes_before_each_ingest(tmp_path: Path) -> None:
    from gpufleet.flows.serve import build_deployments

    assert len(build_deployments(load_config(data_dir=tmp_path, environ={}))) == 3  # no URL
    config = config_from(tmp_path, '[prometheus]\nurl = "http://prom:9090"\n')
    ingest, *_, prometheus = build_deployments(config)
    assert (prometheus.flow_name, prometheus.name) == ("import-prometheus", "every-15-minutes")
    assert prometheus.entrypoint == "gpufleet.flows.import_prometheus.import_prometheus_flow"
    assert prometheus.parameters == {
        "data_dir": str(tmp_path.resolve()),
        "config_path": str((tmp_path / "gpufleet.toml").resolve()),
        "url": None,
    }
    (ours,) = prometheus.schedules or []
    (theirs,) = ingest.schedules or []
    assert ours.schedule.interval == theirs.schedule.interval == dt.timedelta(minutes=15)
    ahead = theirs.schedule.anchor_date - ours.schedule.anchor_date
    assert ahead == dt.timedelta(minutes=3)


def test_the_points_of_an_answer_read_in_bulk_as_one_by_one() -> None:
    """The usual answer's points are unzipped and checked in Arrow; an answer with a time
    that is a text of one (or a point of another shape) is read point by point as before,
    to the same rows."""
    power = next(m for m in METRICS if m.column == "power_w")
    first = 1_790_000_040

    def series(gpu: int, times: list[Any]) -> dict[str, Any]:
        labels = {"Hostname": "h", "UUID": f"GPU-{gpu}", "gpu": str(gpu), "modelName": "H100"}
        return {"metric": labels, "values": [[t, f"{100 + gpu}.5"] for t in times]}

    def table(answer: list[dict[str, Any]]):
        steps = HostSteps(60, first, 3)
        steps.add(power, answer, query="q", prometheus=PrometheusConfig())
        return steps.table(METRICS)

    numbers = [series(0, [first, first + 60.0]), series(1, [first + 120])]
    texts = [series(0, [str(first), first + 60.0]), series(1, [first + 120])]
    assert table(numbers).num_rows == 3
    assert table(texts).equals(table(numbers))
    assert table(numbers).column("power_w").to_pylist() == [100.5, 100.5, 101.5]


def test_a_windows_rows_are_cut_per_host_and_utc_date_in_their_order() -> None:
    """rows_by_host keeps each host's rows in the order they came (GPU, then time), hosts
    interleaved or not; rows_by_date cuts a window over UTC midnight in two, and leaves a
    window within a day whole."""
    midnight = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    minutes = [-2, -1, 0, 1, -1, 0]
    table = pa.table(
        {
            "ts": pa.array(
                [midnight + dt.timedelta(minutes=m) for m in minutes], pa.timestamp("us", "UTC")
            ),
            "host": ["b", "a", "b", "a", "b", "c"],
            "gpu_uuid": ["GPU-1", "GPU-2", "GPU-3", "GPU-4", "GPU-5", "GPU-6"],
        }
    )
    hosts = rows_by_host(table)
    assert sorted(hosts) == ["a", "b", "c"]
    assert hosts["a"]["gpu_uuid"].to_pylist() == ["GPU-2", "GPU-4"]
    assert hosts["b"]["gpu_uuid"].to_pylist() == ["GPU-1", "GPU-3", "GPU-5"]
    assert rows_by_host(table.slice(0, 0)) == {}
    dates = {date: part["gpu_uuid"].to_pylist() for date, part in rows_by_date(hosts["b"])}
    assert dates == {"2026-11-28": ["GPU-1", "GPU-5"], "2026-11-29": ["GPU-3"]}
    [(date, whole)] = rows_by_date(hosts["c"])
    assert date == "2026-11-29" and whole.equals(hosts["c"])
    assert list(rows_by_date(table.slice(0, 0))) == []


def test_the_usual_answers_points_are_taken_at_once_and_no_other_shape() -> None:
    """all_points unzips every point of an answer whose series all hold [time, value]
    pairs, in the order of its series; any other shape is left to be read series by series
    (where a point that is no pair fails naming the query)."""

    def answer(*values: Any) -> list[Any]:
        return [{"metric": {}, "values": list(points)} for points in values]

    usual = answer([[1, "a"], (2, "b")], [], [[3.5, "c"]])
    assert all_points(usual) == ([1, 2, 3.5], ["a", "b", "c"])
    assert all_points([]) == ([], [])
    for odd in ([[1, "a", 2]], ["ab"], [{"t": 1, "v": 2}], [[1]]):
        assert all_points(answer([[0, "x"]], odd)) is None, odd
    assert all_points([None]) is None
    assert all_points([{"metric": {}}]) is None
