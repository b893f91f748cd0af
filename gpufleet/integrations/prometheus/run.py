"""`gpufleet import prometheus`: the DCGM series of a span of time, window by window.

The span is half-open, `[since, until)`, in steps: a row's `ts` is a multiple of the step
(`[prometheus] step_seconds`) from the epoch, and the span holds the rows whose `ts` is in it.
Without `--until` it ends `delay_seconds` ago (a later `--until` is cut there: steps not yet
scraped would be recorded as imported). Without `--since` it starts where the last import from
this URL ended, or a day before `until` on the first run. Spans imported before are skipped,
so running the import again writes nothing twice.

Each window (`window_minutes`, aligned to the epoch) is read whole, a batch of hosts at a
time (`queries.HOSTS_PER_QUERY`), before anything is written: a failure (Prometheus gone, a
bad series) writes nothing of the window, and the windows before it stay imported. Then one
sample file per host (per UTC date), the pods' allocation rows, and the window's entry in
`<data_dir>/imports/prometheus.json`, written while the next window is read (a read that
fails waits for the window before it to be written and recorded), so that no more than two
windows are ever held.

The range queries run `READ_AHEAD` at a time, across windows, their answers taken in the
order asked: the rows, and the window a failure stops at, are those of one at a time.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import re
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa

from gpufleet.collectors.schema import host_folder, partition_dir
from gpufleet.collectors.writer import safe_host, write_table_atomically
from gpufleet.config import Config
from gpufleet.errors import GpufleetError
from gpufleet.integrations.files import write_text_atomically
from gpufleet.integrations.prometheus.api import PrometheusApi, PrometheusError
from gpufleet.integrations.prometheus.files import (
    ImportedWindows,
    allocation_files,
    rows_by_date,
    rows_by_host,
)
from gpufleet.integrations.prometheus.pods import (
    NAMESPACES_FILE,
    NamespaceTeam,
    PodAllocation,
    pod_allocations,
    read_namespaces,
)
from gpufleet.integrations.prometheus.queries import (
    METRICS,
    PRESENCE_COLUMN,
    Metric,
    host_batches,
    name_matcher,
    pod_query,
    step_query,
)
from gpufleet.integrations.prometheus.samples import HostSteps

# Range queries in flight (across windows) while the answers before them are turned into
# rows: Prometheus evaluates and encodes them on its own cores meanwhile.
READ_AHEAD = 3
FIRST_IMPORT = dt.timedelta(days=1)  # how far back a first import without --since reaches
STATE_FILE = ("imports", "prometheus.json")


@dataclass(frozen=True)
class ImportResult:
    url: str
    start: dt.datetime  # the span asked for, [start, end), in whole steps
    end: dt.datetime
    windows: int = 0
    hosts: int = 0
    rows: int = 0
    sample_files: int = 0
    pods: int = 0  # pods (on a host's GPU) seen holding a GPU: their allocation rows

    def __str__(self) -> str:
        span = f"[{self.start.isoformat()}, {self.end.isoformat()})"
        if not self.windows:
            return f"import prometheus: nothing new in {span} from {self.url}"
        return (
            f"import prometheus: {self.windows} window(s) of {span} from {self.url}: "
            f"{self.rows:,} rows of {self.hosts} host(s) in {self.sample_files} sample file(s), "
            f"{self.pods} pod(s) on GPUs as allocations"
        )


@dataclass
class _Window:
    """What one window read, before anything is written."""

    tables: dict[str, pa.Table]  # host -> its sample rows
    allocations: list[PodAllocation]


class _Query(NamedTuple):
    """A range query of the window [start, end): a batch's series of `metric`, or its pods."""

    start: int
    end: int
    metric: Metric | None
    text: str


class _WindowEnd(NamedTuple):
    """After a window's queries; or in their place, the error that listing them raised."""

    start: int
    end: int
    error: Exception | None = None


def source_name(url: str) -> str:
    """The URL as a file-name part: `http://prom:9090/x` -> `prom_9090_x`."""
    return safe_host(re.sub(r"^https?://", "", url).rstrip("/"))


def _utc(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(value, tz=dt.UTC)


def _stamp(value: int) -> str:
    return _utc(value).strftime("%Y%m%dT%H%M%SZ")


def _ceil(seconds: float, step: int) -> int:
    return math.ceil(seconds / step) * step


def _seconds(value: dt.datetime, name: str) -> float:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must carry a UTC offset, got {value.isoformat()}")
    return value.timestamp()


def import_prometheus(
    config: Config,
    *,
    url: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    now: dt.datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> ImportResult:
    """Import `[since, until)` (or what is new) from Prometheus at `url` (else
    `[prometheus] url`) into the data directory; see the module's description."""
    settings = config.prometheus
    url = (url or settings.url).rstrip("/")
    if not url:
        raise GpufleetError(
            "no Prometheus to import from: give --url or set 'prometheus.url' in the configuration"
        )
    api = PrometheusApi(url=url, timeout_s=settings.timeout_seconds)
    step = settings.step_seconds
    now_s = (now or dt.datetime.now(dt.UTC)).timestamp()
    latest = _ceil(now_s - settings.delay_seconds, step)
    end = latest if until is None else min(_ceil(_seconds(until, "until"), step), latest)
    state = ImportedWindows(config.data_dir.joinpath(*STATE_FILE))
    if since is not None:
        start = _ceil(_seconds(since, "since"), step)
    else:
        done = state.of(url)
        start = done[-1][1] if done else _ceil(end - FIRST_IMPORT.total_seconds(), step)
    pending = state.missing(url, start, end) if start < end else []
    result = ImportResult(url, _utc(start), _utc(max(start, end)))
    if not pending:
        return result
    namespaces = read_namespaces(config.ref_dir / NAMESPACES_FILE)  # a bad file: before any query
    chosen = series_names(api, config)
    window_s = settings.window_minutes * 60
    hosts: set[str] = set()
    pods: set[tuple[str, str, int]] = set()
    counts = {"windows": 0, "rows": 0, "sample_files": 0}

    def write(window: _Window, start: int, end: int) -> None:
        """Write a window and record it imported (the writer's thread)."""
        files = _write_window(config, url, window, start, end)
        state.add(url, start, end)
        rows = sum(t.num_rows for t in window.tables.values())
        hosts.update(window.tables)
        counts["windows"] += 1
        counts["rows"] += rows
        counts["sample_files"] += files
        pods.update((a.job_id, a.host, a.gpu_index) for a in window.allocations)
        if progress:
            progress(
                f"prometheus: [{_utc(start).isoformat()}, {_utc(end).isoformat()}): "
                f"{rows:,} rows of {len(window.tables)} host(s), "
                f"{len(window.allocations)} pod allocation row(s)"
            )

    # A window is written (its files synced to disk) while the next one is read: at most
    # two windows in memory, whatever the span. A window whose read fails is not written;
    # the one before it is, and is recorded imported, before the failure is raised.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="prometheus-write") as writer:
        written: Future[None] | None = None
        windows = _read_windows(api, config, chosen, namespaces, _windows(pending, window_s))
        try:
            with closing(windows):
                for start_s, end_s, window in windows:
                    if written is not None:
                        written.result()
                    written = writer.submit(write, window, start_s, end_s)
            if written is not None:
                written.result()
        finally:
            if written is not None:
                wait([written])  # a failed read: the window before it still written
    return ImportResult(url, result.start, result.end, hosts=len(hosts), pods=len(pods), **counts)


def _windows(pieces: Iterable[tuple[int, int]], window_s: int) -> Iterator[tuple[int, int]]:
    """The windows of the spans not yet imported: aligned to the epoch, cut at a span's
    ends."""
    for piece_start, piece_end in pieces:
        cursor = piece_start
        while cursor < piece_end:
            window_end = min((cursor // window_s + 1) * window_s, piece_end)
            yield cursor, window_end
            cursor = window_end


def series_names(api: PrometheusApi, config: Config) -> dict[str, str]:
    """Each column's series name: the first of its configured names that Prometheus has."""
    known = set(api.label_values("__name__"))
    chosen: dict[str, str] = {}
    for metric in METRICS:
        for name in config.prometheus.series_names(metric.column):
            if name in known:
                chosen[metric.column] = name
                break
    if not chosen:
        wanted = ", ".join(n for m in METRICS for n in config.prometheus.series_names(m.column))
        raise PrometheusError(
            f"values of label '__name__': {api.url} has none of the DCGM series ({wanted}); "
            "set their names in [prometheus.series] if the site renames them"
        )
    return chosen


def _read_windows(
    api: PrometheusApi,
    config: Config,
    chosen: dict[str, str],
    namespaces: tuple[NamespaceTeam, ...],
    windows: Iterable[tuple[int, int]],
) -> Generator[tuple[int, int, _Window], None, None]:
    """Each window with its hosts' rows and pods, in order; the next window's queries are
    listed while this one's run, and asked while its last answers become rows."""
    step = config.prometheus.step_seconds

    def listed(window: tuple[int, int]) -> list[_Query | _WindowEnd]:
        try:
            return [*_window_queries(api, config, chosen, *window), _WindowEnd(*window)]
        except Exception as exc:  # raised in its turn: the windows before it are written
            return [_WindowEnd(*window, error=exc)]

    def ask(request: _Query | _WindowEnd) -> list[dict[str, Any]]:
        if isinstance(request, _WindowEnd):
            if request.error is not None:
                raise request.error
            return []
        last_ts = request.end - step
        return api.query_range(request.text, start_s=request.start, end_s=last_ts, step_s=step)

    tables: dict[str, pa.Table] = {}
    pod_answers: list[tuple[str, list[dict[str, Any]]]] = []
    steps: HostSteps | None = None
    plans = read_ahead(windows, listed, depth=1)
    requests = itertools.chain.from_iterable(plan for _, plan in plans)
    answers = read_ahead(requests, ask, depth=READ_AHEAD)
    with closing(plans), closing(answers):
        for request, answer in answers:
            if isinstance(request, _WindowEnd):
                allocations = pod_allocations(pod_answers, config=config, namespaces=namespaces)
                yield request.start, request.end, _Window(tables, allocations)
                tables, pod_answers = {}, []
                continue
            if steps is None:  # a batch's first query
                steps = HostSteps(step, request.start, (request.end - request.start) // step)
            if request.metric is not None:
                steps.add(request.metric, answer, query=request.text, prometheus=config.prometheus)
                continue
            pod_answers.append((request.text, answer))  # the batch's last: its rows complete
            tables |= rows_by_host(steps.table(METRICS))
            steps = None


def _window_queries(
    api: PrometheusApi, config: Config, chosen: dict[str, str], start: int, end: int
) -> list[_Query]:
    """The range queries of [start, end): each batch of hosts' series, then its pods."""
    settings = config.prometheus
    step = settings.step_seconds
    names = sorted(set(chosen.values()))
    selector = name_matcher(names)
    first, last = start - step, end - step  # the scrapes the window's steps cover: (first, last]
    _check_key_labels(api, config, selector, first, last)
    host_names = api.label_values(
        settings.host_label, matchers=[selector], start_s=first, end_s=last
    )
    presence = chosen.get(PRESENCE_COLUMN) or names[0]
    queries: list[_Query] = []
    for hosts in host_batches(sorted(host_names)):
        for metric in METRICS:
            name = chosen.get(metric.column)
            if name is not None:  # else not exported: the column stays null
                text = step_query(metric, name, hosts=hosts, prometheus=settings)
                queries.append(_Query(start, end, metric, text))
        pods = pod_query(presence, hosts=hosts, prometheus=settings, kubernetes=config.kubernetes)
        queries.append(_Query(start, end, None, pods))
    return queries


Item = TypeVar("Item")
Answer = TypeVar("Answer")


def read_ahead(
    items: Iterable[Item], read: Callable[[Item], Answer], depth: int = 2
) -> Generator[tuple[Item, Answer], None, None]:
    """Each item with its read, in order, while up to `depth` later reads run. A read that
    fails raises where its item comes; the reads after it are cancelled or waited for."""
    remaining = iter(items)
    with ThreadPoolExecutor(max_workers=depth, thread_name_prefix="prometheus") as pool:
        pending: deque[tuple[Item, Future[Answer]]] = deque(
            (item, pool.submit(read, item)) for item in itertools.islice(remaining, depth)
        )
        try:
            while pending:
                item, future = pending.popleft()
                for later in itertools.islice(remaining, 1):
                    pending.append((later, pool.submit(read, later)))
                yield item, future.result()
        finally:
            for _, future in pending:
                future.cancel()


def _check_key_labels(
    api: PrometheusApi, config: Config, selector: str, start_s: float, end_s: float
) -> None:
    """Fail when a DCGM series lacks the host or UUID label: its rows would have no key."""
    inner = selector[1:-1]
    for key in (config.prometheus.host_label, config.prometheus.uuid_label):
        matcher = f'{{{inner}, {key}=""}}'
        found = api.series([matcher], start_s=start_s, end_s=end_s)
        if found:
            labels = dict(found[0])
            name = labels.pop("__name__", "?")
            shown = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            raise PrometheusError(
                f"series {matcher}: {name}{{{shown}}} has no '{key}' label "
                f"({len(found)} such series)"
            )


def _write_window(config: Config, url: str, window: _Window, start: int, end: int) -> int:
    """Write a window's sample files and allocation rows; returns the number of sample
    files. The allocation files are prepared (and any existing one checked) first."""
    source = source_name(url)
    cluster = config.prometheus.cluster or config.cluster or None
    rows = [row._replace(cluster=cluster) for row in window.allocations]
    allocations = allocation_files(config.allocations_dir, source, rows)
    stem = f"prometheus-{source}-{_stamp(start)}-{_stamp(end)}"
    written = 0
    for host, table in sorted(window.tables.items()):
        if cluster is not None:  # the site, in every row and in the host's folder name
            where = table.schema.get_field_index("cluster")
            value = pa.array([cluster] * len(table), pa.string())
            table = table.set_column(where, table.schema.field(where), value)
        folder = host_folder(safe_host(host), cluster)
        for date, part in rows_by_date(table):
            directory = Path(partition_dir(str(config.samples_dir), date, folder))
            write_table_atomically(part, directory / f"{stem}.parquet", plain_nulls=True)
            written += 1
    for path, text in allocations.items():
        write_text_atomically(path, text)
    return written
