"""How a batch is cut: the new files into batches, and a batch too large to read at once into
pieces of whole files, each file larger than a piece alone (read in slices, `sliced.py`)."""

from __future__ import annotations

from collections.abc import Sequence

from gpufleet.config import Config
from gpufleet.warehouse.base.sample_files import SampleFile
from gpufleet.warehouse.ingest.footers import read_footer
from gpufleet.warehouse.ingest.read import row_count

# Two batches are read at once (`pipeline.READ_AHEAD`): 1,000 files each bound their rows.
MAX_FILES_PER_BATCH = 1000
# The most rows read at once: a batch of 1,000 ten-minute files of 8 GPUs at 10 s holds
# 480,000. At up to three batches in memory at once (one loading, two read ahead) and about
# 0.6 KB a row while one is read and sorted, this keeps an ingest within its 2 GB.
MAX_ROWS_PER_READ = 600_000


def plan_batches(
    files: Sequence[SampleFile], max_files: int = MAX_FILES_PER_BATCH
) -> list[list[SampleFile]]:
    """Runs of files (sorted by path) of one `date=` partition, at most `max_files`, made of
    whole directories: a host-day's files stay in one batch (to be compacted from its rows,
    `CompactAhead`) unless they alone are more, and deduplication looks at one day."""
    directories: dict[str, list[SampleFile]] = {}
    for file in sorted(files, key=lambda f: f.path):
        directories.setdefault(file.directory, []).append(file)
    batches: list[list[SampleFile]] = []
    current_key: str | None = None
    for directory, members in directories.items():
        key = next((part for part in directory.split("/") if part.startswith("date=")), "")
        fits = batches and len(batches[-1]) + len(members) <= max_files
        if not batches or key != current_key or not fits:
            batches.append([])
            current_key = key
        for file in members:
            if len(batches[-1]) >= max_files:
                batches.append([])
            batches[-1].append(file)
    return batches


def pieces(config: Config, batch: Sequence[SampleFile]) -> list[tuple[list[SampleFile], bool]]:
    """The batch as runs of whole files of at most `MAX_ROWS_PER_READ` rows together (by
    their footers' row counts), and each file of more alone, marked to be read in slices."""
    found: list[tuple[list[SampleFile], bool]] = []
    current: list[SampleFile] = []
    rows = 0
    for file in batch:
        path = str(config.data_dir / file.path)
        footer = read_footer(path, file.path)
        count = 0 if footer.plan.problem else row_count([path])
        if count > MAX_ROWS_PER_READ:
            found.append(([file], True))
            continue
        if current and rows + count > MAX_ROWS_PER_READ:
            found.append((current, False))
            current, rows = [], 0
        current.append(file)
        rows += count
    if current:
        found.append((current, False))
    return found
