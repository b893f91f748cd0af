"""A Slurm payload read as a stream (gpufleet/integrations/slurm/stream.py): the same jobs and
the same one-line errors as the payload loaded whole, and the reader never more than one
chunk ahead of the job it hands out, so the import's memory does not hold the whole JSON.
Its figures at 100,000 jobs: bench/slurm_import.py (docs/performance.md)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.errors import GpufleetError
from gpufleet.integrations.slurm.payload import load_payload
from gpufleet.integrations.slurm.sacct import parse_sacct
from gpufleet.integrations.slurm.squeue import parse_squeue
from gpufleet.integrations.slurm.stream import CHUNK_BYTES, PayloadStream, parse_stream

FIXTURES = Path(__file__).parent / "slurm_fixtures"
RELEASES = ("22.05", "23.11", "24.11")


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def streamed(document: dict[str, Any], parse=parse_sacct):
    return parse_stream(io.BytesIO(json.dumps(document).encode()), source="saved.json", parse=parse)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize(("command", "parse"), [("sacct", parse_sacct), ("squeue", parse_squeue)])
def test_a_stream_gives_the_jobs_of_the_whole_payload(release, command, parse) -> None:
    text = (FIXTURES / f"{command}-{release}.json").read_text()
    whole = parse(load_payload(text, source="saved.json"))
    assert whole
    assert streamed(json.loads(text), parse) == whole


def test_the_reader_is_never_more_than_a_chunk_ahead_of_the_job_it_gives() -> None:
    """The bounded memory, structurally: 3,000 jobs (about 90 chunks of JSON) come one by
    one, each when at most one chunk past its end has been read."""
    document = fixture("sacct-24.11.json")  # the data_parser layout: jobs before meta
    template = document["jobs"][0]
    parts = [b'{"jobs": [']
    ends = []
    for number in range(3000):
        job = template | {"job_id": 100 + number}
        parts.append((b"," if number else b"") + json.dumps(job).encode())
        ends.append(sum(map(len, parts)) if not ends else ends[-1] + len(parts[-1]))
    parts.append(b'], "meta": ' + json.dumps(document["meta"]).encode() + b', "errors": []}')
    data = b"".join(parts)
    assert len(data) > 50 * CHUNK_BYTES
    payload = PayloadStream(io.BytesIO(data), source="saved.json")
    count = 0
    for number, job in enumerate(payload.jobs()):
        assert job["job_id"] == 100 + number
        assert payload.bytes_read <= ends[number] + CHUNK_BYTES
        count += 1
    assert count == 3000
    assert payload.version == 42  # printed after the jobs, read before them


@pytest.mark.parametrize("release", ["22.05", "24.11"])
def test_a_stream_names_the_unknown_schema_rather_than_a_job_it_could_not_read(release) -> None:
    """22.05 prints meta before the jobs, the data_parser releases after: either way an
    unknown schema is the line, not the field of a job of that schema."""
    document = fixture(f"sacct-{release}.json")
    document["jobs"][1]["state"] = 5  # a shape no release prints
    with pytest.raises(GpufleetError, match=r"^saved\.json: jobs\[1\]\.state"):
        streamed(document)
    plugin = document["meta"]["plugin"]
    plugin.update(type="openapi/dbv0.0.37") if release == "22.05" else plugin.update(
        data_parser="v0.0.99"
    )
    with pytest.raises(GpufleetError, match=r"^saved\.json: meta\.plugin\.\w+: unknown schema"):
        streamed(document)
    document["errors"] = [{"description": "Unable to connect to the database"}]
    with pytest.raises(GpufleetError, match=r"^saved\.json: Slurm reported an error: Unable"):
        streamed(document)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", r"not JSON"),
        (b"sacct: error: Problem talking to the database", r"not JSON"),
        (b"[1, 2]", r"expected a JSON object with 'meta' and 'jobs'"),
        (b'{"jobs": [{"job_id": 1}', r"not JSON \(parse error: premature EOF\)$"),
        (b'{"jobs": []} x', r"not JSON \(parse error: trailing garbage\)$"),
        (b'{"jobs": 5, "meta": {"plugin": {"type": "openapi/dbv0.0.38"}}}', r"jobs: expected a"),
        (b'{"meta": {"plugin": {"type": "openapi/dbv0.0.38"}}}', r"jobs: expected a list, got"),
        (b'{"jobs": []}', r"meta\.plugin: missing"),
    ],
)
def test_a_stream_that_is_no_payload_is_one_line(data: bytes, message: str) -> None:
    with pytest.raises(GpufleetError, match=rf"^saved\.json: {message}") as caught:
        parse_stream(io.BytesIO(data), source="saved.json", parse=parse_sacct)
    assert "\n" not in str(caught.value)


def test_an_integer_beyond_64_bits_is_read_as_the_whole_payload_reads_it() -> None:
    """yajl cannot read it; the payload is then loaded whole (`parse` called again), and the
    job with the impossible time is refused alone, as without the stream."""
    document = fixture("sacct-24.11.json")
    document["jobs"][2]["time"]["start"] = 10**30
    text = json.dumps(document)

    def parse(payload):
        refused: list = []
        return parse_sacct(payload, refused=refused), [r.job_id for r in refused]

    jobs, refused = parse_stream(io.BytesIO(text.encode()), source="saved.json", parse=parse)
    assert (jobs, refused) == parse(load_payload(text, source="saved.json"))
    assert refused == ["3"]
    assert len(jobs) == len(document["jobs"]) - 1
