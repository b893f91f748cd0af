"""`gpufleet import prometheus`: dcgm-exporter's series and pods, from the Prometheus a site
already runs, as sample files and allocation rows (docs/kubernetes.md)."""

from __future__ import annotations

import argparse
import datetime as dt

from gpufleet.cli.common import progress
from gpufleet.config import Config
from gpufleet.console import printable_lines


def iso_timestamp(value: str) -> dt.datetime:
    """argparse type for an ISO-8601 time with a UTC offset (`2026-11-16T09:00:00+01:00`)."""
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"'{value}' is not an ISO-8601 time like 2026-11-16T09:00:00+01:00"
        ) from exc
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise argparse.ArgumentTypeError(f"'{value}' has no UTC offset (add +00:00 or Z)")
    return parsed


def add_prometheus(imports: argparse._SubParsersAction) -> None:
    parser = imports.add_parser(
        "prometheus",
        help="GPU samples and pods from Prometheus (NVIDIA dcgm-exporter)",
        description=(
            "Read the DCGM series (dcgm-exporter's names, or those of [prometheus.series])\n"
            "from Prometheus with query_range, up to 32 hosts a query, window by window,\n"
            "and write one sample file per host and window under <data-dir>/raw/samples: a\n"
            "row per GPU and step ([prometheus] step_seconds), the mean of the step's\n"
            "scrapes. Pods that hold GPUs become allocation rows (job id namespace/pod)\n"
            "under raw/allocations.\n"
            "The span is [--since, --until): what is new since the last import from this\n"
            "URL by default; a span imported before is never written twice. Then run\n"
            "'gpufleet ingest' and 'gpufleet build'."
        ),
        epilog=(
            "examples:\n"
            "  gpufleet import prometheus --url http://prometheus:9090\n"
            "  gpufleet import prometheus --url http://prometheus:9090 "
            "--since 2026-11-01T00:00:00+00:00 --until 2026-11-08T00:00:00+00:00"
        ),
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="the Prometheus server, e.g. http://prometheus:9090 (default: [prometheus] url)",
    )
    parser.add_argument(
        "--since",
        type=iso_timestamp,
        metavar="TIME",
        help="first time to import, ISO-8601 with offset (default: where the last import "
        "from this URL ended, else a day before --until)",
    )
    parser.add_argument(
        "--until",
        type=iso_timestamp,
        metavar="TIME",
        help="end of the span, excluded (default and latest: now less [prometheus] delay_seconds)",
    )
    parser.set_defaults(handler=run_import_prometheus, needs_pipeline=False)


def run_import_prometheus(args: argparse.Namespace, config: Config) -> int:
    from gpufleet.integrations.prometheus import import_prometheus

    result = import_prometheus(
        config, url=args.url, since=args.since, until=args.until, progress=progress
    )
    print(printable_lines(result))
    return 0
