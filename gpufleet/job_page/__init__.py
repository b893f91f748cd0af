"""A job's own page (`gpufleet job JOBID`), as `jobstats JOBID` gives Slurm users: its GPUs,
hours, utilization (and SM activity, where measured) hour by hour, peak memory, idle
stretches and waste; and the list of one user's jobs (`gpufleet job --user USER`).

Everything is read from the published warehouse, read-only, in one sandboxed connection
(`read`): the job's rows of `job_efficiency` (its figures), of `gpu_hourly` (each GPU's
hours), of `run_pieces` with `idle_episodes` (its idle stretches, each its part of an idle
episode, as `job_efficiency` counts its waste) and of `samples_attributed` (each GPU's
index), into the page's records (`records`), shown as text (`text`) or JSON. SM activity is
shown where the marts carry it: `job_efficiency.avg_sm_active_pct`, and
`gpu_hourly.sm_active_s` over `activity_s` hour by hour; a warehouse without those columns
says "not measured". A user's jobs are `ReadOnlyWarehouse.jobs`'s rows (`user_jobs`).

Names (job ids, hosts, users, teams, GPU models) are untrusted: the text escapes every
character that is not printable (`gpufleet.console.printable`); the JSON keeps them exact,
escaped as JSON escapes them.
"""

from gpufleet.job_page.read import load_job_page
from gpufleet.job_page.records import GpuHour, IdleStretch, JobGpu, JobPage
from gpufleet.job_page.user_jobs import UserJobs, load_user_jobs

__all__ = [
    "GpuHour",
    "IdleStretch",
    "JobGpu",
    "JobPage",
    "UserJobs",
    "load_job_page",
    "load_user_jobs",
]
