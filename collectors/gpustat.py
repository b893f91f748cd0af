"""Which Slurm job holds each GPU, from jobstats' prolog files (`--slurm-gpustat DIR`).

Princeton's jobstats convention: while a job runs, its prolog writes one file per GPU it was
given, `DIR/<GPU index>` (or `DIR/<MIG UUID>` for a MIG device), holding `<job id> <uid>`;
its epilog removes the file. The scheduler writes these whether or not a process runs, so a
GPU a job holds but leaves idle is still attributed to the job.

Each tick lists DIR once and reads its small files. Nothing here ever stops the collector: a
missing directory, or an unreadable, empty, half-written or malformed file, is left out of
that tick and said once in the log.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

# A job id as Slurm sets SLURM_JOB_ID (`4242`), or as a site's prolog may print an array task
# or a heterogeneous component (`4242_7`, `4242+1`); a uid is a decimal number.
_JOB_ID = re.compile(r"\d+(?:[_+]\d+)?")
_UID = re.compile(r"\d+")
_INDEX_NAME = re.compile(r"\d+")
_MIG_PREFIX = "MIG-"
_MAX_FILE_BYTES = 256  # `<job id> <uid>\n` is a few dozen bytes


@dataclass(frozen=True, slots=True)
class Holder:
    """The job that holds a GPU (or MIG device), and its user's name."""

    job_id: str
    user: str


class GpustatDir:
    """Reads a jobstats gpustat directory once per tick: file name -> `Holder`."""

    def __init__(self, directory: Path, *, say: Callable[[str, str], None]) -> None:
        self.directory = Path(directory)
        self._say = say
        self._user_names: dict[int, str] = {}
        self._bad_files: set[str] = set()  # file names already reported
        self._directory_problem = ""  # the last problem with the directory, said once
        self._holders: dict[str, Holder] = {}

    def refresh(self) -> None:
        """List the directory and read its files; call once per tick."""
        self._holders = {}
        try:
            entries = list(os.scandir(self.directory))
        except OSError as exc:
            self._directory_unreadable(exc)
            return
        if self._directory_problem:
            self._say("warning", f"reading the Slurm gpustat files in {self.directory} again")
            self._directory_problem = ""
        for entry in entries:
            name = entry.name
            if not (_INDEX_NAME.fullmatch(name) or name.startswith(_MIG_PREFIX)):
                continue  # not a GPU's file (a temporary file, a foreign one)
            found = self._read(entry.path)
            if isinstance(found, Holder):
                self._holders[name] = found
            elif found:
                self._bad(name, found)

    def holder(self, index: int, mig_uuids: Iterable[str] = ()) -> Holder | None:
        """The job holding a GPU this tick: for a MIG-enabled GPU the job of its first MIG
        device (in NVML's order) that has a file, else the GPU index's file; None if neither."""
        for uuid in mig_uuids:
            found = self._holders.get(uuid)
            if found is not None:
                return found
        return self._holders.get(str(index))

    def holder_of(self, name: str) -> Holder | None:
        """The job holding the device of the file `name` (a MIG device's UUID) this tick."""
        return self._holders.get(name)

    def _directory_unreadable(self, exc: OSError) -> None:
        if isinstance(exc, FileNotFoundError):
            problem = "does not exist (yet)"
        else:
            problem = f"cannot be read ({exc.strerror or exc})"
        if problem != self._directory_problem:
            self._say(
                "warning",
                f"the Slurm gpustat directory {self.directory} {problem}; GPUs get no job "
                "until it can be read",
            )
            self._directory_problem = problem

    def _read(self, path: str) -> Holder | str:
        """The holder in a file, or what is wrong with it ("" when it is gone)."""
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return ""  # the epilog removed it between the listing and the read
        except OSError as exc:
            return f"cannot be read ({exc.strerror or exc})"
        if len(data) > _MAX_FILE_BYTES:
            return f"is larger than {_MAX_FILE_BYTES} bytes"
        fields = data.decode("ascii", errors="replace").split()
        if not fields:
            return "is empty"
        if len(fields) != 2 or not _JOB_ID.fullmatch(fields[0]) or not _UID.fullmatch(fields[1]):
            return f"does not hold '<job id> <uid>': {data[:60]!r}"
        return Holder(job_id=fields[0], user=self._user_name(int(fields[1])))

    def _bad(self, name: str, problem: str) -> None:
        """Say what is wrong with a file, once per file name."""
        if name not in self._bad_files:
            self._bad_files.add(name)
            self._say(
                "warning",
                f"Slurm gpustat file {self.directory / name} {problem}; ignored while it "
                "stays so (said once per file)",
            )

    def _user_name(self, uid: int) -> str:
        name = self._user_names.get(uid)
        if name is None:
            try:
                name = pwd.getpwuid(uid).pw_name
            except (KeyError, OverflowError):
                name = str(uid)
            self._user_names[uid] = name
        return name
