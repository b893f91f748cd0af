"""A job's page as text: its figures, a table of its GPUs, a utilization sparkline per GPU
by local hour, and its idle stretches; names escaped (`gpufleet.console.printable`)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from zoneinfo import ZoneInfo

from gpufleet.console import printable
from gpufleet.job_page.records import GpuHour, JobPage, gpu_label, pct

GIB = 1 << 30
# The widest sparkline: a longer job's characters stand for several hours each.
SPARK_WIDTH = 72
SPARK = "▁▂▃▄▅▆▇█"  # 0 % .. 100 %
NO_READING = "·"  # an hour without a utilization (no sample of the GPU, or none measured)
# The idle stretches the text lists (the JSON has all): every waste one, then the longest.
SHOWN_STRETCHES = 10
NOT_MEASURED = "not measured"


def page_lines(page: JobPage) -> list[str]:
    zone = page.zone
    site = "" if page.cluster is None else f" at site {printable(page.cluster)}"
    who = ", ".join(
        f"{label} {name_or_dash(value)}"
        for label, value in (
            ("user", page.user),
            ("team", page.team),
            ("account", page.account),
            ("partition", page.partition),
            ("state", page.state),
        )
    )
    lines = [f"job {printable(page.job_id)}{site}", f"  {who}", f"  ran {_span(page, zone)}"]
    models = ", ".join(printable(model) for model in page.gpu_models)
    gpus = (
        f"{page.gpus_allocated} ({models}), {len(page.gpus)} with samples"
        if page.gpus
        else f"{page.gpus_allocated}, none with samples"
    )
    utilization = (
        "–"
        if page.avg_util_pct is None
        else f"{page.avg_util_pct:.1f} % (busy {page.busy_gpu_hours:.2f} of "
        f"{page.measured_gpu_hours:.2f} GPU-hours with a utilization)"
    )
    sm_active = (
        NOT_MEASURED if page.avg_sm_active_pct is None else f"{page.avg_sm_active_pct:.1f} %"
    )
    share = pct(page.idle_gpu_hours, page.gpu_hours)
    idle = f"{page.idle_gpu_hours:.2f} GPU-hours" + (
        "" if share is None else f" ({share:.0f} % of its GPU-hours)"
    )
    allocated = "" if page.alloc_gpu_hours is None else f", {page.alloc_gpu_hours:.2f} allocated"
    figures = [
        ("GPUs", gpus),
        ("GPU-hours", f"{page.gpu_hours:.2f} observed{allocated}"),
        ("GPU utilization", utilization),
        ("SM activity", sm_active),
        ("idle", f"{idle}, below {page.idle_threshold_pct:g} % utilization"),
        (
            "waste",
            f"{page.waste_gpu_hours:.2f} GPU-hours, {usd(page.waste_usd)} "
            f"(idle stretches of {page.waste_min_minutes:g} min or more)",
        ),
        ("memory peak", memory(page.max_mem_used_bytes, page.mem_total_bytes)),
        ("energy", "–" if page.energy_kwh is None else f"{page.energy_kwh:.2f} kWh"),
    ]
    lines += ["", *(f"  {label:<16} {value}" for label, value in figures)]
    if page.gpus:
        lines += ["", *_gpu_table(page)]
        lines += ["", *_sparklines(page)]
    else:
        lines += ["", "No samples of this job: its GPUs are not known."]
    lines += ["", *_stretch_lines(page, zone)]
    return lines


def name_or_dash(value: str | None) -> str:
    return "–" if value is None else printable(value)


def _span(page: JobPage, zone: ZoneInfo) -> str:
    start, end = page.start_ts, page.end_ts
    if start is None:
        return "–"
    text = f"from {local_time(start, zone)}"
    if end is None:
        return f"{text} ({zone.key}), still running"
    took = duration((end - start).total_seconds())
    return f"{text} to {local_time(end, zone)} ({zone.key}), {took}"


def local_time(value: dt.datetime, zone: ZoneInfo, pattern: str = "%a %Y-%m-%d %H:%M") -> str:
    return value.astimezone(zone).strftime(pattern)


def duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest:02d} min"


def usd(value: float) -> str:
    return f"${value:,.2f}"


def memory(used: int | None, total: int | None) -> str:
    if used is None:
        return "–"
    if not total:
        return f"{used / GIB:.1f} GiB"
    return f"{used / GIB:.1f} of {total / GIB:.0f} GiB ({100 * used / total:.0f} %)"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0f} %"


def _gpu_table(page: JobPage) -> list[str]:
    rows = [
        [
            gpu.name,
            printable(gpu.gpu_uuid),
            name_or_dash(gpu.gpu_name),
            f"{gpu.gpu_hours:.2f}",
            percent(gpu.avg_util_pct),
            NOT_MEASURED if gpu.avg_sm_active_pct is None else percent(gpu.avg_sm_active_pct),
            f"{gpu.idle_gpu_hours:.2f}",
            memory(gpu.max_mem_used_bytes, gpu.mem_total_bytes),
        ]
        for gpu in page.gpus
    ]
    headers = ["GPU", "uuid", "model", "GPU-hours", "util", "SM active", "idle h", "memory peak"]
    return aligned(headers, rows, right={3, 4, 5, 6})


def aligned(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: set[int]) -> list[str]:
    """`rows` under `headers` in columns two spaces apart, those in `right` right-aligned."""
    widths = [max(len(row[k]) for row in (headers, *rows)) for k in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.rjust(width) if k in right else cell.ljust(width)
            for k, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "  " + "  ".join(padded).rstrip()

    return [line(headers), *(line(row) for row in rows)]


def _sparklines(page: JobPage) -> list[str]:
    """Each GPU's utilization (and SM activity, where measured) over the job's local
    hours, one character an hour, or several hours when the job ran longer than
    SPARK_WIDTH hours."""
    slots = sorted({(hour.day, hour.hour) for gpu in page.gpus for hour in gpu.hours})
    first = _wall_hour(*slots[0])
    count = int((_wall_hour(*slots[-1]) - first).total_seconds() // 3600) + 1
    per_char = math.ceil(count / SPARK_WIDTH)
    unit = "an hour" if per_char == 1 else f"{per_char} hours"
    lines = [
        f"Utilization by hour, from {first.strftime('%a %Y-%m-%d %H:00')} ({page.timezone}); "
        f"one character {unit}: {SPARK[0]} 0 % to {SPARK[-1]} 100 %, {NO_READING} none",
    ]
    names = [gpu.name for gpu in page.gpus]
    width = max(len(name) for name in names)
    measured_sm = any(gpu.avg_sm_active_pct is not None for gpu in page.gpus)
    for gpu, name in zip(page.gpus, names, strict=True):
        buckets: list[list[GpuHour]] = [[] for _ in range(math.ceil(count / per_char))]
        for hour in gpu.hours:
            offset = int((_wall_hour(hour.day, hour.hour) - first).total_seconds() // 3600)
            buckets[offset // per_char].append(hour)
        util = "".join(
            _spark(_share(bucket, "busy_gpu_hours", "measured_gpu_hours")) for bucket in buckets
        )
        lines.append(f"  {name:<{width}}  util  {util}")
        if measured_sm:
            sm = "".join(
                _spark(_share(bucket, "sm_active_gpu_hours", "activity_gpu_hours"))
                for bucket in buckets
            )
            lines.append(f"  {'':<{width}}  SM    {sm}")
    if not measured_sm:
        lines.append(f"  SM activity: {NOT_MEASURED}")
    return lines


def _share(hours: Sequence[GpuHour], part: str, whole: str) -> float | None:
    """100 x the sum of one figure of `hours` over the sum of another (None: no whole)."""
    return pct(
        sum(getattr(hour, part) for hour in hours), sum(getattr(hour, whole) for hour in hours)
    )


def _wall_hour(day: dt.date, hour: int) -> dt.datetime:
    """A local (day, hour) as a naive datetime, to count hours between two of them."""
    return dt.datetime.combine(day, dt.time(hour))


def _spark(pct: float | None) -> str:
    if pct is None:
        return NO_READING
    step = round(max(0.0, min(100.0, pct)) / 100 * (len(SPARK) - 1))
    return SPARK[step]


def _stretch_lines(page: JobPage, zone: ZoneInfo) -> list[str]:
    stretches = page.idle_stretches
    if not stretches:
        return ["Idle stretches: none"]
    # every waste stretch, then the longest others, shown in time order
    ranked = sorted(stretches, key=lambda s: (not s.is_waste, -s.idle_seconds))
    shown = sorted(ranked[:SHOWN_STRETCHES], key=lambda s: (s.start_ts, s.host))
    lines = [f"Idle stretches ({len(stretches)}; waste: {page.waste_min_minutes:g} min or more)"]
    rows = [
        [
            gpu_label(s.host, s.gpu_index),
            f"{local_time(s.start_ts, zone)} to {local_time(s.end_ts, zone, '%H:%M')}",
            duration(s.idle_seconds),
            "waste" if s.is_waste else "",
            usd(s.waste_usd) if s.is_waste else "",
        ]
        for s in shown
    ]
    lines += aligned(["GPU", f"idle ({page.timezone})", "for", "", "cost"], rows, right={2, 4})
    rest = ranked[SHOWN_STRETCHES:]
    if rest:
        seconds = sum(s.idle_seconds for s in rest)
        lines.append(f"  and {len(rest)} shorter ones: {duration(seconds)} in all")
    return lines
