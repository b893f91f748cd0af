"""Slurm as a source: the jobs sacct and squeue know become allocation rows
(`docs/slurm.md`).

- `payload.py`: the `--json` output of every Slurm release read, with one-line errors;
- `sacct.py`: jobs (user, account, nodes, times, GPU count); `squeue.py`: the GPU indices
  running jobs hold, from `gres_detail`; `hostlist.py`: `node[01-04]` expanded;
- `accounts.py`: teams from accounts and ref/accounts.csv;
- `files.py`: the allocation files by cluster and day, and the watermark; `run.py`: a run.
"""

from gpufleet.integrations.slurm.run import SlurmImport, import_slurm

__all__ = ["SlurmImport", "import_slurm"]
