"""`squeue --json`: which GPUs of which node each running job holds.

A running job's `gres_detail` has one string per node of the job, in the order of its
nodes: `gpu:a100:2(IDX:0-1)`, `gpu:2(IDX:0,2-3)`, several GRES separated by commas
(`gpu:a100:1(IDX:3),shard:0(0/4)`). The indices are the node's GPUs in gres.conf order
(NVML's order when Slurm detects them with AutoDetect=nvml), the same numbers as the job's
`SLURM_JOB_GPUS`. With MIG, Slurm counts MIG devices (types such as `a100_3g.20gb` or
`1g.10gb`), not GPUs: those indices are not NVML GPU indices, so they are listed as
`mig` and not turned into allocation rows. The detail is gone once the job ends.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import NamedTuple

from gpufleet.config import IngestConfig
from gpufleet.integrations.slurm.hostlist import expand_hostlist
from gpufleet.integrations.slurm.payload import Job, Payload, Refused, RefusedTime, time_limits
from gpufleet.integrations.slurm.sacct import SlurmJob, job_id

# One GRES of a node's detail: name[:type]:count(IDX:...|shared detail), or name[:type](CNT:n).
_GRES = re.compile(
    r"(?P<name>[^:,()]+)(?::(?P<type>[^:,()]+))?"
    r"(?::(?P<count>\d+)\((?P<detail>[^)]*)\)|\(CNT:(?P<cnt>\d+)\))"
)
_MIG_TYPE = re.compile(r"\d+g\.\d+gb", re.IGNORECASE)
# A GPU index: ASCII digits (str.isdigit() also takes "²", which int() refuses), at most
# NVML's largest; a range past it stops there rather than listing billions of GPUs.
_INDEX = re.compile(r"[0-9]{1,9}")
_MAX_GPU_INDEX = 65535


class NodeGpus(NamedTuple):
    node: str
    gpu_indices: tuple[int, ...]  # node-global GPU indices; empty when Slurm gave none
    mig: bool = False  # the job holds MIG devices: the indices count MIG devices


class HeldGpus(NamedTuple):
    """A running job as squeue shows it, and the GPUs it holds on each node."""

    job: SlurmJob
    nodes: tuple[NodeGpus, ...]


def gpu_indices(detail: str) -> tuple[tuple[int, ...], bool]:
    """The GPU indices in one node's GRES detail, and whether they are MIG devices."""
    indices: list[int] = []
    mig = False
    for match in _GRES.finditer(detail):
        if match.group("name").strip() != "gpu":
            continue
        mig = mig or bool(_MIG_TYPE.search(match.group("type") or ""))
        found = match.group("detail") or ""
        if not found.startswith("IDX:"):
            continue
        for piece in found[len("IDX:") :].split(","):
            first, _, last = piece.strip().partition("-")
            if _INDEX.fullmatch(first) and (not last or _INDEX.fullmatch(last)):
                indices.extend(range(int(first), min(int(last or first), _MAX_GPU_INDEX) + 1))
    return tuple(sorted(set(indices))), mig


def _node_names(job: Job) -> tuple[str, ...]:
    """The job's nodes in the order of `gres_detail`: job_resources' allocation list
    (v0.0.41 on: nodes.allocation[].name; before: allocated_nodes[].nodename), else the
    expanded `nodes` host list."""
    resources = job.get("job_resources", required=False)
    if isinstance(resources, dict):
        nodes = resources.get("nodes")
        listed = nodes.get("allocation") if isinstance(nodes, dict) else None
        key = "name"
        if listed is None:
            listed, key = resources.get("allocated_nodes"), "nodename"
        if isinstance(listed, list) and all(isinstance(n, dict) and key in n for n in listed):
            return tuple(str(n[key]) for n in listed)
    text = job.text("nodes")
    return expand_hostlist(text) if text else ()


def parse_squeue(
    payload: Payload,
    *,
    now: dt.datetime | None = None,
    ingest: IngestConfig | None = None,
    refused: list[Refused] | None = None,
) -> dict[str, HeldGpus]:
    """Each job with GPUs in its GRES detail (a running job), by job id (as sacct's). A job
    whose start is out of range is refused, as `parse_sacct` refuses it."""
    held: dict[str, HeldGpus] = {}
    limits = time_limits(ingest, now)
    for index, data in enumerate(payload.jobs):
        job = Job(payload, index, data, limits=limits)
        details = job.get("gres_detail", required=False) or []
        if not isinstance(details, list) or not all(isinstance(d, str) for d in details):
            raise job.error("gres_detail", "expected a list of strings")
        if not details:
            continue
        nodes = _node_names(job)
        if len(nodes) != len(details):
            raise job.error(
                "gres_detail",
                f"{len(details)} entries for {len(nodes)} nodes ({','.join(nodes) or 'none'})",
            )
        per_node = []
        for node, detail in zip(nodes, details, strict=True):
            indices, mig = gpu_indices(detail)
            if indices or mig:
                per_node.append(NodeGpus(node, indices, mig))
        if not per_node:
            continue
        base = job.number("job_id")
        key = job_id(job, base, ("array_job_id", "array_task_id"), ("het_job_id", "het_job_offset"))
        try:
            start = job.timestamp("start_time")
        except RefusedTime as refusal:
            job.refuse(key, refusal, refused, left_out="left out of squeue's GPUs")
            continue
        running = SlurmJob(
            job_id=key,
            job_id_raw=None if base is None else str(base),
            user=job.text("user_name"),
            account=job.text("account"),
            partition=job.text("partition"),
            cluster=job.text("cluster"),
            state=job.states("job_state")[0],
            start_ts=start,
            end_ts=None,
            nodes=nodes,
            gpus=sum(len(n.gpu_indices) for n in per_node),
        )
        held[key] = HeldGpus(running, tuple(per_node))
    return held
