"""`gpufleet collect`: the sampling loop, its signals, its spool and its Parquet flushes."""

from __future__ import annotations

import datetime as dt
import math
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pynvml

from gpufleet.collectors.gpustat import GpustatDir
from gpufleet.collectors.nvml import (
    GpuLostError,
    GpuReader,
    GpuSample,
    GpuState,
    Nvml,
    NvmlUninitializedError,
    init_nvml,
    list_gpus,
    shutdown_nvml,
)
from gpufleet.collectors.procinfo import ProcessInfo
from gpufleet.collectors.spool import Spool, read_segment
from gpufleet.collectors.stopflag import StopFlag
from gpufleet.collectors.writer import (
    InvalidSpoolError,
    SampleWriteError,
    safe_host,
    use_lean_memory_pool,
    write_sample_files,
)
from gpufleet.errors import GpufleetError
from gpufleet.site_names import check_cluster

if TYPE_CHECKING:
    from gpufleet.collectors.upload import Uploader

_MAX_REINIT_BACKOFF_S = 300.0
_MAX_UNSPOOLED_TICKS = 360  # ticks kept in memory while the disk refuses the spool


class Collector:
    """Samples every GPU of the host once per `tick()` into a spool; `flush()` writes Parquet."""

    def __init__(
        self,
        *,
        data_dir: Path,
        interval_s: float,
        flush_s: float,
        host: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        stderr: TextIO | None = None,
        fsync: bool = True,
        proc_root: Path = Path("/proc"),
        slurm_gpustat: Path | None = None,
        uploader: Uploader | None = None,
        cluster: str | None = None,
    ) -> None:
        if not (interval_s > 0 and math.isfinite(interval_s)):
            raise ValueError(f"interval_s must be a positive number of seconds, got {interval_s}")
        if not (flush_s > 0 and math.isfinite(flush_s)):
            raise ValueError(f"flush_s must be a positive number of seconds, got {flush_s}")
        host = host if host is not None else socket.gethostname()
        if not host:
            raise ValueError("host must be a non-empty string")
        self.host = host
        # the site recorded in every sample (`cluster`) and in the host's folder name
        self.cluster = check_cluster(cluster) if cluster else None
        self.interval_s = float(interval_s)
        self.flush_s = float(flush_s)
        self.samples_root = Path(data_dir) / "raw" / "samples"
        self.spool = Spool(
            directory=Path(data_dir) / "raw" / ".spool" / f"host={safe_host(host)}", fsync=fsync
        )
        self._wall_clock = wall_clock
        self._monotonic = monotonic
        self._stderr = stderr
        self._nvml = Nvml()
        self._procinfo = ProcessInfo(proc_root=proc_root)
        # jobstats' prolog files: which Slurm job holds each GPU (None: not read at all)
        self._gpustat = (
            GpustatDir(slurm_gpustat, say=self._say) if slurm_gpustat is not None else None
        )
        self._reader = GpuReader(nvml=self._nvml, procinfo=self._procinfo, host=host)
        self._gpus: dict[str, GpuState] = {}
        self._started = False
        self._last_tick = 0.0
        self._next_flush = 0.0
        self._flush_retry_s = min(self.flush_s, 60.0)
        self._flush_failure = ""  # the last flush error, printed once while it lasts
        self._reinit_backoff_s = self.interval_s
        self._next_reinit = 0.0
        self._unspooled: list[tuple[list[dict[str, Any]], str, str]] = []
        self._spool_failing = False
        self.uploader = uploader  # ships the finished files to a bucket (`upload.py`)

    @property
    def gpus(self) -> list[GpuState]:
        return list(self._gpus.values())

    def _say(self, level: str, message: str) -> None:
        stream = self._stderr if self._stderr is not None else sys.stderr
        print(f"gpufleet: {level}: {message}", file=stream, flush=True)

    # -- NVML -------------------------------------------------------------------------------

    def start(self) -> None:
        """Initialise NVML, find the GPUs and write any spool a previous run left behind."""
        use_lean_memory_pool()
        init_nvml()
        self._started = True
        try:
            self._enumerate()
        except (pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            raise GpufleetError(f"cannot list the GPUs through NVML: {exc}") from exc
        now = self._monotonic()
        self._last_tick = now
        self._next_flush = now + self.flush_s
        self.flush()  # a restart converts a leftover spool first
        if self.uploader is not None:
            self.uploader.upload(budget_s=self.interval_s)  # and uploads what waits

    def _enumerate(self) -> None:
        found = list_gpus()
        for state in found:
            known = self._gpus.get(state.uuid)
            if known is None:
                self._gpus[state.uuid] = state
                known = state
            else:  # `lost` stays until a read succeeds
                known.index, known.handle = state.index, state.handle
                known.name = state.name or known.name
            self._reader.prime(known)
        seen = {state.uuid for state in found}
        for uuid, known in self._gpus.items():
            if uuid not in seen:
                if not known.lost:
                    self._say(
                        "warning", f"GPU {known.index} ({uuid}) is lost: NVML lists it no more"
                    )
                known.handle, known.lost = None, True

    def _shutdown(self) -> None:
        """Free what NVML handed out for the GPUs (GPM samples, event sets), nvmlShutdown."""
        for gpu in self._gpus.values():
            self._reader.release(gpu)
        shutdown_nvml()

    def _reinit(self) -> bool:
        """nvmlShutdown, nvmlInit and fetch handles again by UUID (a lost GPU, a reload)."""
        self._shutdown()
        try:
            init_nvml()
            self._nvml.forget_unsupported()
            self._enumerate()
        except (GpufleetError, pynvml.NVMLError, pynvml.NVMLLibraryMismatchError) as exc:
            for gpu in self._gpus.values():
                gpu.handle, gpu.lost = None, True
            self._next_reinit = min(self._next_reinit, self._monotonic() + self.interval_s)
            self._say("warning", f"NVML re-initialisation failed ({exc}); retrying")
            return False
        return True

    # -- one tick ---------------------------------------------------------------------------

    def tick(self) -> list[GpuSample]:
        """Read every GPU, append the rows to the spool, and flush if it is time."""
        if not self._started:
            raise RuntimeError("call start() before tick()")
        now = self._monotonic()
        if any(g.lost for g in self._gpus.values()) and now >= self._next_reinit:
            self._reinit()
            self._next_reinit = now + self._reinit_backoff_s
            self._reinit_backoff_s = min(self._reinit_backoff_s * 2, _MAX_REINIT_BACKOFF_S)
        ts_s = self._wall_clock()
        ts_us = int(ts_s * 1_000_000)
        interval_s = max(now - self._last_tick, 0.0)
        self._last_tick = now

        gpus = list(self._gpus.values())
        samples = [sample for gpu in gpus for sample in self._read(gpu, ts_us, interval_s)]
        for sample in samples:
            sample.cluster = self.cluster
        self._procinfo.sweep()
        if self._gpustat is not None:
            self._attribute(samples, self._gpustat)

        date_iso = dt.datetime.fromtimestamp(ts_s, tz=dt.UTC).date().isoformat()
        if self.spool.segment_date is not None and self.spool.segment_date != date_iso:
            self.flush()  # UTC midnight: the next file belongs to the new date
        stamp = dt.datetime.fromtimestamp(ts_s, tz=dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
        self._spool([s.to_record() for s in samples], stamp, date_iso)

        if self._monotonic() >= self._next_flush:
            self.flush()
        if self.uploader is not None and self.uploader.due():
            self.uploader.upload(budget_s=self.interval_s / 2)  # the next tick comes first
        return samples

    def _read(self, gpu: GpuState, ts_us: int, interval_s: float) -> list[GpuSample]:
        """The GPU's rows this tick (its own, then its MIG devices'), or its `lost` row."""
        for attempt in range(2):
            if gpu.handle is None:
                break
            try:
                rows = self._reader.read(gpu, ts_us=ts_us, interval_s=interval_s)
            except GpuLostError:
                if not gpu.lost:  # newly lost: re-initialise at the next tick, then back off
                    self._say("warning", f"GPU {gpu.index} ({gpu.uuid}) is lost")
                    self._next_reinit = min(self._next_reinit, self._monotonic())
                gpu.lost = True
                break
            except NvmlUninitializedError:
                if attempt == 0 and self._reinit():
                    self._say("warning", "NVML was re-initialised (driver reload?)")
                    continue
                gpu.lost = True
                break
            if gpu.lost:
                self._say("warning", f"GPU {gpu.index} ({gpu.uuid}) is back")
                gpu.lost = False
                if not any(g.lost for g in self._gpus.values()):
                    self._reinit_backoff_s = self.interval_s
            return rows
        return [self._reader.lost_sample(gpu, ts_us=ts_us, interval_s=interval_s)]

    def _attribute(self, samples: list[GpuSample], gpustat: GpustatDir) -> None:
        """Fill `alloc_job_id`/`alloc_user` from the gpustat files of this tick (a lost GPU
        too: the scheduler's record says the job holds it). A MIG device's row takes its own
        file's job; a GPU's row that of its GPU index, or of its first MIG device with one."""
        gpustat.refresh()
        for sample in samples:
            if sample.parent_gpu_uuid is not None:
                holder = gpustat.holder_of(sample.gpu_uuid)
            else:
                gpu = self._gpus[sample.gpu_uuid]
                holder = gpustat.holder(gpu.index, gpu.mig_uuids)
            if holder is not None:
                sample.alloc_job_id, sample.alloc_user = holder.job_id, holder.user

    def _spool(self, records: list[dict[str, Any]], stamp: str, date_iso: str) -> None:
        self._unspooled.append((records, stamp, date_iso))
        del self._unspooled[:-_MAX_UNSPOOLED_TICKS]
        self._drain_unspooled()

    def _drain_unspooled(self) -> None:
        """Append the ticks waiting in memory to the spool, oldest first, while it accepts."""
        while self._unspooled:
            records, stamp, date_iso = self._unspooled[0]
            if self.spool.segment_date not in (None, date_iso):
                self.spool.rotate()
            try:
                self.spool.append(records, stamp=stamp, date_iso=date_iso)
            except OSError as exc:
                if not self._spool_failing:
                    self._say(
                        "error",
                        f"cannot append to the spool in {self.spool.directory}: "
                        f"{exc.strerror or exc}; keeping samples in memory and retrying",
                    )
                self._spool_failing = True
                self.spool.rotate()
                return
            self._unspooled.pop(0)
        self._spool_failing = False

    # -- Parquet ----------------------------------------------------------------------------

    def flush(self, *, final: bool = False) -> bool:
        """Turn every spool segment into Parquet; True when nothing is left to write.

        On a full or unwritable disk: one clear error line, the spool is kept, and the write
        is retried later (every min(flush, 60 s)), or at the next start when `final`.
        """
        self._drain_unspooled()
        self.spool.rotate()
        try:
            for segment in self.spool.closed_segments():
                records = read_segment(segment)
                try:
                    if records:
                        write_sample_files(
                            records,
                            samples_root=self.samples_root,
                            host=self.host,
                            stem=segment.stem,
                            cluster=self.cluster,
                        )
                except InvalidSpoolError as exc:  # never retried forever: set aside, go on
                    bad = segment.with_suffix(".bad")
                    segment.rename(bad)
                    self._say("warning", f"spool segment set aside as {bad}: {exc}")
                    continue
                segment.unlink()
        except (SampleWriteError, OSError) as exc:
            if isinstance(exc, SampleWriteError):
                message = str(exc)
            else:
                message = f"cannot read or remove the spool: {exc.strerror or exc}"
            retry = "at the next start" if final else f"in {self._flush_retry_s:g} s"
            if message != self._flush_failure or final:  # not the same line every minute
                self._say(
                    "error",
                    f"{message}; the spool in {self.spool.directory} is kept and the write "
                    f"is retried {retry}",
                )
            self._flush_failure = message
            self._next_flush = self._monotonic() + self._flush_retry_s
            return False
        if self._flush_failure:
            self._say("warning", "sample files are being written again")
        self._flush_failure = ""
        self._next_flush = self._monotonic() + self.flush_s
        return True

    def close(self) -> bool:
        """Flush what is spooled and shut NVML down; True when everything was written."""
        flushed = self.flush(final=True)
        if self.uploader is not None and not self.uploader.upload(budget_s=30.0):
            waiting = len(self.uploader.pending())
            self._say(
                "warning",
                f"{waiting} file(s) not uploaded yet wait in {self.samples_root}: the next "
                "start uploads them",
            )
        if self._started:
            self._shutdown()
            self._started = False
        return flushed

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop: StopFlag) -> None:
        """Tick on a drift-free schedule (deadlines from a monotonic clock) until `stop`."""
        start = self._monotonic()
        n = 1
        while not stop.is_set():
            stop.wait(start + n * self.interval_s - self._monotonic())
            if stop.is_set():
                break
            self.tick()
            # Skip the deadlines already missed (a stall) rather than ticking in a burst.
            n = max(n + 1, math.floor((self._monotonic() - start) / self.interval_s) + 1)
