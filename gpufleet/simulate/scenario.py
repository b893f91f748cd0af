"""The simulated fleet's story: hosts, GPUs, teams, scheduler jobs and each GPU's timeline.

A GPU's timeline is a list of pieces, each a constant `State` (utilization level, power,
temperature, clocks, throttle bits, processes) from one collector tick to the next piece.
The per-tick values (noise, counters) are computed from the pieces in `simulate_rows`.

The scenario is drawn once per spec from its seed; everything that happens in the span
(jobs, the data gap, the driver reload) is fixed here, so any time window of it can be
generated on its own and windows fit together exactly.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import zoneinfo
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

MIB = 1024 * 1024
GIB = 1024 * MIB
HOUR_S = 3600
DAY_S = 86400
RACK_SIZE = 4  # hosts per rack

TEAMS = ("vision", "nlp", "speech", "research", "platform")
# Which teams submit the shared cluster's training jobs, and how often.
TRAINING_TEAMS = ("vision", "nlp", "speech", "research")
TRAINING_WEIGHTS = (0.35, 0.35, 0.15, 0.15)
OWNER_TEAMS = ("research", "speech")  # teams that own hosts (hosts.csv)

# Owners that are not in users.csv, so their samples are attributed to `(unmapped)`.
EXTERNAL_USER = "ext-jmorales"  # an external collaborator with Slurm allocations
ROGUE_UNMAPPED_USER = "tmpuser07"  # runs processes with no allocation
SERVICE_USER = "svc-infer"  # the inference service account (its allocations name a team)

_SURNAME_TEXT = (
    "chen kumar garcia smith nguyen mueller rossi tanaka silva kowalski novak haddad "
    "okafor larsen dubois yilmaz park ivanova fischer moreau santos ahmed berg costa "
    "weber sato lopez meyer khan jensen romano schmidt wang ali olsen reyes"
)
_SURNAMES = tuple(_SURNAME_TEXT.split())
_INITIALS = "abcdefghijklmnoprstvwy"


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    name: str
    price_glob: str
    usd_per_gpu_hour: float
    mem_total_bytes: int
    power_limit_w: float
    idle_power_w: float
    power_noise_w: float  # amplitude of the tick-to-tick power noise
    sm_clock_max_mhz: int
    sm_clock_idle_mhz: int
    mem_clock_mhz: int
    has_hbm_temp: bool
    idle_mem_used_bytes: int  # what NVML reports as used with no process


H100 = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    price_glob="NVIDIA H100*",
    usd_per_gpu_hour=2.50,
    mem_total_bytes=81559 * MIB,
    power_limit_w=700.0,
    idle_power_w=72.0,
    power_noise_w=7.0,
    sm_clock_max_mhz=1980,
    sm_clock_idle_mhz=345,
    mem_clock_mhz=2619,
    has_hbm_temp=True,
    idle_mem_used_bytes=603 * MIB,
)
A100 = GpuModel(
    name="NVIDIA A100-SXM4-80GB",
    price_glob="NVIDIA A100*",
    usd_per_gpu_hour=1.60,
    mem_total_bytes=81920 * MIB,
    power_limit_w=400.0,
    idle_power_w=56.0,
    power_noise_w=4.0,
    sm_clock_max_mhz=1410,
    sm_clock_idle_mhz=210,
    mem_clock_mhz=1593,
    has_hbm_temp=True,
    idle_mem_used_bytes=421 * MIB,
)
L40S = GpuModel(
    name="NVIDIA L40S",
    price_glob="NVIDIA L40S*",
    usd_per_gpu_hour=0.95,
    mem_total_bytes=46068 * MIB,
    power_limit_w=350.0,
    idle_power_w=33.0,
    power_noise_w=3.0,
    sm_clock_max_mhz=2520,
    sm_clock_idle_mhz=210,
    mem_clock_mhz=9001,
    has_hbm_temp=False,
    idle_mem_used_bytes=437 * MIB,
)
GPU_MODELS = (H100, A100, L40S)


@dataclass(frozen=True)
class Proc:
    pid: int
    user: str
    used_mem_bytes: int
    job_id: str | None


@dataclass(frozen=True, kw_only=True)
class State:
    """What a GPU is doing during one piece of its timeline (levels; noise is added per tick)."""

    util_pct: float = 0.0
    util_amp_pct: float = 0.0
    mem_util_pct: float = 0.0
    mem_util_amp_pct: float = 0.0
    power_w: float
    temp_gpu_c: float
    sm_clock_mhz: int
    sm_clock_amp_mhz: int = 0
    clock_event_mask: int = 0
    thermal: bool = False  # counts toward thermal_violation_ns
    power_capped: bool = False  # counts toward power_violation_ns
    procs: tuple[Proc, ...] = ()
    mem_used_bytes: int
    lost: bool = False  # the GPU fell off the bus: status 'lost', metrics null


@dataclass(frozen=True, kw_only=True)
class HostPlan:
    index: int
    name: str
    rack: int  # 1-based
    kind: str  # mixed, training, interactive, spare, owned
    owner_team: str | None
    model: GpuModel
    gpu_count: int
    phase_us: int  # the collector's tick offset within the interval
    hot: bool  # in the hot rack


@dataclass(frozen=True, kw_only=True)
class GpuPlan:
    ordinal: int  # position in Scenario.gpus (hosts in order, GPUs by uuid)
    host: HostPlan
    index: int
    uuid: str
    role: str  # train, notebook, rogue, spare, inference, dev, owned_train, owned_idle
    noise_key: int


@dataclass(frozen=True, kw_only=True)
class AllocationRow:
    job_id: str
    user: str
    team: str  # "" = look the user up in users.csv
    host: str
    gpu_index: int
    start_s: int
    end_s: int | None  # None = still running at the end of the span


@dataclass(kw_only=True)
class _Job:
    kind: str
    gpus: list[GpuPlan]
    start_s: int  # allocation (or, with no allocation, the process) start
    end_s: int
    proc_start_s: int
    proc_end_s: int
    user: str
    team_field: str
    allocated: bool
    serial: int = -1  # order of creation, set by _Builder._add
    job_id: str | None = None
    extra_kernel: bool = False


@dataclass(frozen=True, kw_only=True)
class Events:
    """The one-off phenomena, in epoch seconds."""

    gap_host: str
    gap_start_s: int
    gap_end_s: int
    reload_host: str
    reload_s: int
    lost_gpu_uuid: str
    lost_start_s: int
    hot_rack: int
    hot_hosts: tuple[str, ...]


@dataclass(kw_only=True)
class Timelines:
    """All GPUs' pieces, concatenated in Scenario.gpus order (numpy arrays, one per field)."""

    offsets: np.ndarray  # int64, len(gpus) + 1
    start_tick: np.ndarray  # int64, the first tick of each piece
    util_pct: np.ndarray
    util_amp_pct: np.ndarray
    mem_util_pct: np.ndarray
    mem_util_amp_pct: np.ndarray
    power_w: np.ndarray
    temp_gpu_c: np.ndarray
    sm_clock_mhz: np.ndarray
    sm_clock_amp_mhz: np.ndarray
    clock_event_mask: np.ndarray  # uint64
    lost: np.ndarray  # bool
    mem_used_bytes: np.ndarray  # int64
    energy_base_mj: np.ndarray  # float64: energy(k) = base + 1000*iv*(P*(k - start) + A*h(k))
    thermal_base_ns: np.ndarray  # int64: value at the tick before the piece
    thermal_flag: np.ndarray  # int64 0/1
    power_viol_base_ns: np.ndarray
    power_viol_flag: np.ndarray
    proc_start: np.ndarray  # int64 into the process table
    proc_count: np.ndarray  # int64
    # The process table.
    proc_pid: np.ndarray  # uint32
    proc_user: np.ndarray  # int32 into users
    proc_mem_bytes: np.ndarray  # int64
    proc_job: np.ndarray  # int32 into job_ids, -1 = none
    proc_users: list[str] = field(default_factory=list)
    proc_job_ids: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Scenario:
    hosts: list[HostPlan]
    gpus: list[GpuPlan]
    users: list[tuple[str, str]]  # (user, team) rows of users.csv
    host_rules: list[tuple[str, str]]  # (host_glob, team) rows of hosts.csv
    prices: list[tuple[str, float]]  # (gpu_glob, usd_per_gpu_hour) rows of prices.csv
    allocations: list[AllocationRow]
    events: Events
    timelines: Timelines
    interval_us: int
    span_start_s: int
    span_end_s: int
    _by_host: dict[int, list[GpuPlan]] = field(default_factory=dict, repr=False)

    def host_gpus(self, host: HostPlan) -> list[GpuPlan]:
        """The host's GPUs in uuid order."""
        if not self._by_host:
            for gpu in self.gpus:
                self._by_host.setdefault(gpu.host.index, []).append(gpu)
        return self._by_host[host.index]


# --- per-tick noise ---------------------------------------------------------------------

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_KEY_MUL = np.uint64(0xD1B54A32D192ED03)


def _splitmix(x: np.ndarray) -> np.ndarray:
    z = x + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def unit_noise(key: np.ndarray, tick: np.ndarray, stream: int) -> np.ndarray:
    """A deterministic pseudo-random float in [0, 1) per (GPU key, tick, stream); broadcasts."""
    keys = np.asarray(key, dtype=np.uint64) * _KEY_MUL
    ticks = np.asarray(tick, dtype=np.int64).astype(np.uint64)
    salt = np.uint64((stream * 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF)
    z = _splitmix(np.bitwise_xor(keys, ticks) ^ salt)
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


NOISE_UTIL, NOISE_MEM_UTIL, NOISE_TEMP, NOISE_CLOCK, NOISE_POWER, NOISE_TEMP_MEM = range(1, 7)


# --- states -----------------------------------------------------------------------------


def _state(
    model: GpuModel,
    *,
    hot: bool,
    util: float = 0.0,
    util_amp: float = 0.0,
    mem_util: float = 0.0,
    procs: tuple[Proc, ...] = (),
) -> State:
    load = util / 100.0
    power = model.idle_power_w + (0.92 * model.power_limit_w - model.idle_power_w) * load
    if procs and util == 0.0:
        power += 0.08 * model.idle_power_w  # an idle CUDA context
    ambient, rise = (41.0, 45.0) if hot else (30.0, 36.0)
    mask = 0x1 if util == 0.0 else 0x0  # GPU idle
    capped = power >= 0.88 * model.power_limit_w
    if capped:
        mask |= 0x4  # SW power cap
        power = 0.88 * model.power_limit_w
    busy = util > 0.0
    return State(
        util_pct=util,
        util_amp_pct=util_amp,
        mem_util_pct=mem_util,
        mem_util_amp_pct=min(mem_util, 6.0) if busy else 0.0,
        power_w=power,
        temp_gpu_c=ambient + rise * load + (2.0 if procs else 0.0),
        sm_clock_mhz=model.sm_clock_max_mhz if busy else model.sm_clock_idle_mhz,
        sm_clock_amp_mhz=30 if busy else 0,
        clock_event_mask=mask,
        power_capped=capped,
        procs=procs,
        mem_used_bytes=model.idle_mem_used_bytes + sum(p.used_mem_bytes for p in procs),
    )


def _throttled(state: State, *, model: GpuModel, hardware: bool) -> State:
    """The state under a thermal slowdown: hotter, lower clocks, less power."""
    if hardware:
        return replace(
            state,
            clock_event_mask=(state.clock_event_mask & ~0x4) | 0x40 | 0x20 | 0x8,
            thermal=True,
            power_capped=False,
            temp_gpu_c=92.0,
            sm_clock_mhz=_round15(model.sm_clock_max_mhz * 0.5),
            sm_clock_amp_mhz=90,
            power_w=state.power_w * 0.62,
        )
    return replace(
        state,
        clock_event_mask=(state.clock_event_mask & ~0x4) | 0x20,
        thermal=True,
        power_capped=False,
        temp_gpu_c=88.5,
        sm_clock_mhz=_round15(model.sm_clock_max_mhz * 0.78),
        sm_clock_amp_mhz=60,
        power_w=state.power_w * 0.84,
    )


def _round15(mhz: float) -> int:
    return round(mhz / 15.0) * 15


# --- layout -----------------------------------------------------------------------------


def host_kinds(n_hosts: int) -> list[str]:
    """Host kinds in host order, in fixed fractions of the fleet (at least one of each)."""
    if n_hosts == 1:
        return ["mixed"]
    owned = max(1, round(0.15 * n_hosts))
    shared = n_hosts - owned
    spare = round(0.07 * shared) if shared >= 4 else 0
    interactive = round(0.2 * shared) if shared >= 3 else 0
    mixed = max(1, round(0.1 * shared))
    training = shared - spare - interactive - mixed
    return (
        ["mixed"] * mixed
        + ["training"] * training
        + ["interactive"] * interactive
        + ["spare"] * spare
        + ["owned"] * owned
    )


def gpu_roles(kind: str, n: int) -> list[str]:
    """Roles of a host's GPUs by index."""
    if kind == "training":
        return ["train"] * n
    if kind == "spare":
        return ["spare"] * n
    if kind == "owned":
        idle = max(1, n // 4) if n >= 2 else 0
        return ["owned_train"] * (n - idle) + ["owned_idle"] * idle
    if kind == "interactive":
        notebooks = max(1, math.ceil(n / 2))
        inference = max(0, min(n - notebooks, max(1, n // 4)))
        return (
            ["notebook"] * notebooks
            + ["inference"] * inference
            + ["dev"] * (n - notebooks - inference)
        )
    # mixed: a bit of everything
    spare = 1 if n >= 3 else 0
    rogue = 1 if n >= 4 else 0
    notebook = max(1, round(n * 0.25)) if n >= 2 else 0
    train = n - spare - rogue - notebook
    return ["train"] * train + ["notebook"] * notebook + ["rogue"] * rogue + ["spare"] * spare


def host_name(index: int) -> str:
    return f"gpu-r{index // RACK_SIZE + 1:02d}n{index % RACK_SIZE + 1:02d}"


def _users(gpus: int) -> list[tuple[str, str]]:
    per_team = max(3, min(30, gpus // 40))
    rows: list[tuple[str, str]] = []
    seen: set[str] = set()
    i = 0
    for team in TEAMS:
        for _ in range(per_team):
            name = f"{_INITIALS[i % len(_INITIALS)]}{_SURNAMES[(i * 7) % len(_SURNAMES)]}"
            while name in seen:
                name += str(i % 10)
            seen.add(name)
            rows.append((name, team))
            i += 1
    return rows


def _host_rules(hosts: Sequence[HostPlan]) -> list[tuple[str, str]]:
    """hosts.csv rows: a rack glob where a team owns every host of a rack, else host names."""
    rules: list[tuple[str, str]] = []
    by_rack: dict[int, list[HostPlan]] = {}
    for host in hosts:
        by_rack.setdefault(host.rack, []).append(host)
    for rack, members in by_rack.items():
        owners = {h.owner_team for h in members}
        if len(members) == RACK_SIZE and len(owners) == 1 and None not in owners:
            rules.append((f"gpu-r{rack:02d}n*", str(members[0].owner_team)))
            continue
        rules.extend((h.name, h.owner_team) for h in members if h.owner_team)
    return rules


def _uuid(rng: np.random.Generator) -> str:
    parts = rng.integers(0, 2**32, size=4, dtype=np.uint64)
    hexes = "".join(f"{int(p):08x}" for p in parts)
    return f"GPU-{hexes[:8]}-{hexes[8:12]}-{hexes[12:16]}-{hexes[16:20]}-{hexes[20:32]}"


# --- jobs -------------------------------------------------------------------------------


def _sequence(
    rng: np.random.Generator,
    start_s: int,
    stop_s: int,
    duration: Callable[[], float],
    gap: Callable[[], float],
    blackouts: Sequence[tuple[int, int]],
) -> list[tuple[int, int]]:
    """Back-to-back intervals with gaps from start_s until stop_s, avoiding the blackouts."""
    out: list[tuple[int, int]] = []
    t = start_s + int(rng.uniform(0.0, 1.0) * gap())
    while t < stop_s:
        length = int(duration())
        s, e = t, t + length
        for b0, b1 in blackouts:
            if b0 <= s < b1:
                s, e = b1, b1 + length
            elif s < b0 < e:
                e = b0
        if e - s >= 600 and s < stop_s:
            out.append((s, e))
        t = max(e, s) + int(gap()) + 60
    return out


def _pick(rng: np.random.Generator, items: Sequence[str]) -> str:
    return items[int(rng.integers(0, len(items)))]


class _Builder:
    def __init__(
        self,
        *,
        seed: int,
        gpus: int,
        gpus_per_host: int,
        interval_us: int,
        span_start_s: int,
        span_end_s: int,
        timezone: str,
    ) -> None:
        self.seed = seed
        self.n_gpus = gpus
        self.gpus_per_host = gpus_per_host
        self.interval_us = interval_us
        self.span_start_s = span_start_s
        self.span_end_s = span_end_s
        self.horizon_s = span_start_s - 2 * DAY_S  # jobs already running at the start
        self.tz = zoneinfo.ZoneInfo(timezone)
        self.users = _users(gpus)
        self.team_users: dict[str, list[str]] = {t: [] for t in TEAMS}
        for user, team in self.users:
            self.team_users[team].append(user)
        self.jobs: list[_Job] = []

    # layout

    def layout(self) -> tuple[list[HostPlan], list[GpuPlan], Events]:
        rng = np.random.default_rng([self.seed, 1])
        n_hosts = math.ceil(self.n_gpus / self.gpus_per_host)
        kinds = host_kinds(n_hosts)
        training = [i for i, k in enumerate(kinds) if k == "training"]
        mixed = [i for i, k in enumerate(kinds) if k == "mixed"]
        owned = [i for i, k in enumerate(kinds) if k == "owned"]
        interactive = [i for i, k in enumerate(kinds) if k == "interactive"]
        busy = mixed + training
        hot_rack = (busy[len(busy) // 2] if training else 0) // RACK_SIZE + 1
        research_hosts = max(1, round(0.6 * len(owned)))
        hosts: list[HostPlan] = []
        for i, kind in enumerate(kinds):
            owner = None
            if kind == "owned":
                owner = OWNER_TEAMS[0] if owned.index(i) < research_hosts else OWNER_TEAMS[1]
            model = {"owned": A100, "interactive": L40S}.get(kind, H100)
            count = min(self.gpus_per_host, self.n_gpus - i * self.gpus_per_host)
            phase_ms = int(rng.integers(0, max(1, self.interval_us // 1000)))
            hosts.append(
                HostPlan(
                    index=i,
                    name=host_name(i),
                    rack=i // RACK_SIZE + 1,
                    kind=kind,
                    owner_team=owner,
                    model=model,
                    gpu_count=count,
                    phase_us=phase_ms * 1000,
                    hot=i // RACK_SIZE + 1 == hot_rack,
                )
            )
        gpus: list[GpuPlan] = []
        for host in hosts:
            roles = gpu_roles(host.kind, host.gpu_count)
            entries = sorted((_uuid(rng), index, role) for index, role in enumerate(roles))
            for uuid, index, role in entries:
                key = int(rng.integers(0, 2**62))
                gpus.append(
                    GpuPlan(
                        ordinal=len(gpus),
                        host=host,
                        index=index,
                        uuid=uuid,
                        role=role,
                        noise_key=key,
                    )
                )
        gap_host = hosts[training[-1] if training else 0]
        reload_host = hosts[interactive[0] if interactive else n_hosts - 1]
        span = self.span_end_s - self.span_start_s
        gap_len = max(3 * self.interval_us // 1_000_000, min(90 * 60, span // 4))
        gap_start = self.span_start_s + (int(span * 0.4) // 60) * 60 + 7
        reload_s = self.span_start_s + (int(span * 0.6) // 60) * 60 + 13
        lost_gpu = next(g for g in gpus if g.host.index == reload_host.index and g.index == 0)
        events = Events(
            gap_host=gap_host.name,
            gap_start_s=gap_start,
            gap_end_s=gap_start + gap_len,
            reload_host=reload_host.name,
            reload_s=reload_s,
            lost_gpu_uuid=lost_gpu.uuid,
            lost_start_s=reload_s - min(20 * 60, max(span // 40, 60)),
            hot_rack=hot_rack,
            hot_hosts=tuple(h.name for h in hosts if h.hot),
        )
        return hosts, gpus, events

    # jobs

    def _blackouts(self, host: HostPlan, events: Events) -> list[tuple[int, int]]:
        if host.name != events.reload_host:
            return []
        span = self.span_end_s - self.span_start_s
        before = min(45 * 60, max(span // 20, 120))
        after = min(10 * 60, max(span // 80, 60))
        return [(events.reload_s - before, events.reload_s + after)]

    def _add(self, job: _Job) -> None:
        job.serial = len(self.jobs)
        self.jobs.append(job)

    def plan_jobs(self, hosts: list[HostPlan], gpus: list[GpuPlan], events: Events) -> None:
        external_forced = False
        for host in hosts:
            rng = np.random.default_rng([self.seed, 2, host.index])
            blackouts = self._blackouts(host, events)
            mine = [g for g in gpus if g.host.index == host.index]
            by_role: dict[str, list[GpuPlan]] = {}
            for g in sorted(mine, key=lambda g: g.index):
                by_role.setdefault(g.role, []).append(g)
            train = by_role.get("train", [])
            if train:
                streams = [train]
                if len(train) >= 2 and rng.random() < 0.5:
                    half = len(train) // 2
                    streams = [train[:half], train[half:]]
                for stream in streams:
                    self._training_stream(rng, stream, blackouts, owner=None)
            owned_train = by_role.get("owned_train", [])
            if owned_train:
                self._training_stream(rng, owned_train, blackouts, owner=host.owner_team)
            notebooks = by_role.get("notebook", [])
            for i, gpu in enumerate(notebooks):
                force = not external_forced and host.kind == "mixed" and i == len(notebooks) - 1
                external_forced = external_forced or force
                self._notebooks(rng, gpu, blackouts, force_external=force)
            for gpu in by_role.get("rogue", []):
                self._rogue(rng, gpu, blackouts)
            for gpu in by_role.get("inference", []):
                self._inference(rng, gpu, blackouts)
            for gpu in by_role.get("dev", []):
                self._dev(rng, gpu, blackouts)
        # Slurm numbers jobs in submission order.
        allocated = sorted(
            (j for j in self.jobs if j.allocated), key=lambda j: (j.start_s, j.serial)
        )
        base = 4_800_000 + self.seed % 1000 * 1000
        for number, job in enumerate(allocated):
            job.job_id = str(base + number * 3 + job.serial % 3)

    def _training_stream(
        self,
        rng: np.random.Generator,
        stream: list[GpuPlan],
        blackouts: list[tuple[int, int]],
        *,
        owner: str | None,
    ) -> None:
        def duration() -> float:
            hours = rng.uniform(0.5, 3.0) if rng.random() < 0.3 else rng.uniform(4.0, 30.0)
            return hours * HOUR_S

        def gap() -> float:
            return float(rng.exponential(5 * HOUR_S if owner else 25 * 60))

        for start, end in _sequence(rng, self.horizon_s, self.span_end_s, duration, gap, blackouts):
            team = owner or str(rng.choice(TRAINING_TEAMS, p=TRAINING_WEIGHTS))
            user = _pick(rng, self.team_users[team])
            team_field = team if rng.random() < 0.7 else ""
            proc_start = start + int(rng.uniform(30, 120))
            proc_end = end - int(rng.uniform(5, 60))
            if rng.random() < 0.1:  # crashed: the allocation idles on until its time limit
                proc_end = proc_start + int((proc_end - proc_start) * rng.uniform(0.2, 0.8))
            kind = "owned" if owner else "train"
            self._add(
                _Job(
                    kind=kind,
                    gpus=stream,
                    start_s=start,
                    end_s=end,
                    proc_start_s=proc_start,
                    proc_end_s=max(proc_end, proc_start + 60),
                    user=user,
                    team_field=team_field,
                    allocated=True,
                )
            )

    def _notebooks(
        self,
        rng: np.random.Generator,
        gpu: GpuPlan,
        blackouts: list[tuple[int, int]],
        *,
        force_external: bool,
    ) -> None:
        def duration() -> float:
            return float(rng.uniform(4 * HOUR_S, 3 * DAY_S))

        def gap() -> float:
            return float(rng.exponential(3 * HOUR_S))

        sessions = _sequence(rng, self.horizon_s, self.span_end_s, duration, gap, blackouts)
        # The external user's session is the one that overlaps the span's start.
        first_in_span = next((i for i, (_, e) in enumerate(sessions) if e > self.span_start_s), -1)
        for i, (start, end) in enumerate(sessions):
            if (force_external and i == first_in_span) or rng.random() < 0.06:
                user, team_field = EXTERNAL_USER, ""
            else:
                team = _pick(rng, TEAMS)
                user = _pick(rng, self.team_users[team])
                team_field = team if rng.random() < 0.25 else ""
            self._add(
                _Job(
                    kind="notebook",
                    gpus=[gpu],
                    start_s=start,
                    end_s=end,
                    proc_start_s=start + int(rng.uniform(60, 300)),
                    proc_end_s=end - 30,
                    user=user,
                    team_field=team_field,
                    allocated=True,
                    extra_kernel=bool(rng.random() < 0.2),
                )
            )

    def _rogue(
        self, rng: np.random.Generator, gpu: GpuPlan, blackouts: list[tuple[int, int]]
    ) -> None:
        def duration() -> float:
            return float(rng.uniform(1 * HOUR_S, 10 * HOUR_S))

        def gap() -> float:
            return float(rng.uniform(2 * HOUR_S, 12 * HOUR_S))

        mapped = self.team_users["research"][-1]
        sessions = _sequence(rng, self.horizon_s, self.span_end_s, duration, gap, blackouts)
        for i, (start, end) in enumerate(sessions):
            user = ROGUE_UNMAPPED_USER if i % 2 == 0 else mapped
            self._add(
                _Job(
                    kind="rogue",
                    gpus=[gpu],
                    start_s=start,
                    end_s=end,
                    proc_start_s=start,
                    proc_end_s=end,
                    user=user,
                    team_field="",
                    allocated=False,
                )
            )

    def _inference(
        self, rng: np.random.Generator, gpu: GpuPlan, blackouts: list[tuple[int, int]]
    ) -> None:
        """One long-running service allocation, restarted around a maintenance window."""
        runs = [(self.horizon_s - int(rng.uniform(1, 10) * DAY_S), self.span_end_s + 30 * DAY_S)]
        for b0, b1 in blackouts:
            runs = [(s, b0) for s, _ in runs] + [(b1, e) for _, e in runs]
        for start, end in runs:
            self._add(
                _Job(
                    kind="inference",
                    gpus=[gpu],
                    start_s=start,
                    end_s=end,
                    proc_start_s=start + 90,
                    proc_end_s=end - 30,
                    user=SERVICE_USER,
                    team_field="platform",
                    allocated=True,
                )
            )

    def _dev(
        self, rng: np.random.Generator, gpu: GpuPlan, blackouts: list[tuple[int, int]]
    ) -> None:
        def duration() -> float:
            return float(rng.uniform(0.5 * HOUR_S, 4 * HOUR_S))

        def gap() -> float:
            return float(rng.exponential(3 * HOUR_S))

        for start, end in _sequence(rng, self.horizon_s, self.span_end_s, duration, gap, blackouts):
            team = _pick(rng, TEAMS)
            self._add(
                _Job(
                    kind="dev",
                    gpus=[gpu],
                    start_s=start,
                    end_s=end,
                    proc_start_s=start + int(rng.uniform(20, 90)),
                    proc_end_s=end - 20,
                    user=_pick(rng, self.team_users[team]),
                    team_field=team if rng.random() < 0.5 else "",
                    allocated=True,
                )
            )

    # timelines

    def job_points(self, job: _Job) -> dict[int, list[tuple[int, State]]]:
        """Each GPU's change points while the job's processes run (the job's own pieces)."""
        rng = np.random.default_rng([self.seed, 3, job.serial])
        model = job.gpus[0].host.model
        hot = job.gpus[0].host.hot
        t0, t1 = job.proc_start_s, job.proc_end_s
        total = model.mem_total_bytes
        base_pid = int(rng.integers(2_000, 3_900_000))
        out: dict[int, list[tuple[int, State]]] = {}
        if job.kind in ("train", "owned"):
            mem = int(total * rng.uniform(0.55, 0.93)) // MIB * MIB
            levels: list[tuple[int, float, float]] = []
            t = t0
            while t < t1:
                levels.append((t, float(rng.uniform(84.0, 97.0)), float(rng.uniform(30, 65))))
                t += int(rng.uniform(20, 90) * 60)
            for rank, gpu in enumerate(job.gpus):
                proc = (Proc(base_pid + rank, job.user, mem, job.job_id),)
                points = [
                    (t, _state(model, hot=hot, util=u, util_amp=3.0, mem_util=m, procs=proc))
                    for t, u, m in levels
                ]
                if hot:
                    points = self._throttle_runs(rng, points, t1, model)
                out[gpu.ordinal] = points
            return out
        gpu = job.gpus[0]
        if job.kind == "notebook":
            mem = int(total * rng.uniform(0.1, 0.75)) // MIB * MIB
            procs = [Proc(base_pid, job.user, mem, job.job_id)]
            if job.extra_kernel:
                procs.append(Proc(base_pid + 211, job.user, mem // 4, job.job_id))
            held = tuple(procs)
            points = [(t0, _state(model, hot=hot, procs=held))]
            t = t0 + int(rng.exponential(2.5 * HOUR_S))
            while t < t1:
                burst = int(rng.uniform(5, 25) * 60)
                util = float(rng.uniform(15, 60))
                points.append(
                    (
                        t,
                        _state(
                            model, hot=hot, util=util, util_amp=10.0, mem_util=util / 3, procs=held
                        ),
                    )
                )
                points.append((t + burst, _state(model, hot=hot, procs=held)))
                t += burst + int(rng.exponential(2.5 * HOUR_S)) + 60
            out[gpu.ordinal] = [(t, s) for t, s in points if t < t1]
            return out
        if job.kind == "inference":
            mem = int(total * rng.uniform(0.3, 0.5)) // MIB * MIB
            proc = (Proc(base_pid, SERVICE_USER, mem, job.job_id),)
            points = []
            hour = t0 - t0 % HOUR_S
            last = min(t1, self.span_end_s + HOUR_S)
            while hour < last:
                local = dt.datetime.fromtimestamp(hour, self.tz).hour
                daytime = max(0.0, math.sin(math.pi * (local - 7) / 14)) if 7 <= local < 21 else 0
                util = 6.0 + 48.0 * daytime + float(rng.uniform(-3, 3))
                points.append(
                    (
                        max(hour, t0),
                        _state(
                            model, hot=hot, util=util, util_amp=8.0, mem_util=util / 2, procs=proc
                        ),
                    )
                )
                hour += HOUR_S
            out[gpu.ordinal] = points
            return out
        # dev and rogue: steady moderate use
        mem = int(total * rng.uniform(0.1, 0.5)) // MIB * MIB
        util = float(rng.uniform(30, 72))
        proc = (Proc(base_pid, job.user, mem, job.job_id),)
        out[gpu.ordinal] = [
            (t0, _state(model, hot=hot, util=util, util_amp=12.0, mem_util=util / 2, procs=proc))
        ]
        return out

    def _throttle_runs(
        self,
        rng: np.random.Generator,
        points: list[tuple[int, State]],
        end_s: int,
        model: GpuModel,
    ) -> list[tuple[int, State]]:
        t = points[0][0] + int(rng.exponential(60 * 60))
        while t < end_s:
            length = int(rng.uniform(2, 15) * 60)
            hardware = bool(rng.random() < 0.15)
            points = _overlay(
                points,
                t,
                min(t + length, end_s),
                functools.partial(_throttled, model=model, hardware=hardware),
            )
            t += length + int(rng.exponential(60 * 60)) + 60
        return points


def _overlay(
    points: list[tuple[int, State]],
    t0: int,
    t1: int,
    transform: Callable[[State], State],
) -> list[tuple[int, State]]:
    """Change points with `transform` applied to the states in [t0, t1) (points[0][0] <= t0)."""
    before = [p for p in points if p[0] < t0]
    inside = [p for p in points if t0 <= p[0] < t1]
    after = [p for p in points if p[0] >= t1]
    at_t0 = inside[0][1] if inside and inside[0][0] == t0 else before[-1][1]
    at_t1 = inside[-1][1] if inside else at_t0
    new = [(t0, transform(at_t0))] + [(t, transform(s)) for t, s in inside if t > t0]
    if not after or after[0][0] > t1:
        new.append((t1, at_t1))
    return before + new + after


def build_scenario(
    *,
    seed: int,
    gpus: int,
    gpus_per_host: int,
    interval_us: int,
    span_start_s: int,
    span_end_s: int,
    timezone: str,
) -> Scenario:
    """Draw the whole scenario for a spec: layout, reference rows, jobs and timelines."""
    builder = _Builder(
        seed=seed,
        gpus=gpus,
        gpus_per_host=gpus_per_host,
        interval_us=interval_us,
        span_start_s=span_start_s,
        span_end_s=span_end_s,
        timezone=timezone,
    )
    hosts, gpu_plans, events = builder.layout()
    builder.plan_jobs(hosts, gpu_plans, events)
    timelines = _timelines(builder, gpu_plans, events)
    allocations = [
        AllocationRow(
            job_id=str(job.job_id),
            user=job.user,
            team=job.team_field,
            host=gpu.host.name,
            gpu_index=gpu.index,
            start_s=job.start_s,
            end_s=job.end_s if job.end_s < span_end_s else None,
        )
        for job in sorted(builder.jobs, key=lambda j: (j.start_s, j.serial))
        if job.allocated and job.end_s > span_start_s and job.start_s < span_end_s
        for gpu in job.gpus
    ]
    models = [m for m in GPU_MODELS if any(h.model == m for h in hosts)]
    return Scenario(
        hosts=hosts,
        gpus=gpu_plans,
        users=builder.users,
        host_rules=_host_rules(hosts),
        prices=[(m.price_glob, m.usd_per_gpu_hour) for m in models],
        allocations=allocations,
        events=events,
        timelines=timelines,
        interval_us=interval_us,
        span_start_s=span_start_s,
        span_end_s=span_end_s,
    )


def _timelines(builder: _Builder, gpus: list[GpuPlan], events: Events) -> Timelines:
    per_gpu: dict[int, list[tuple[int, State]]] = {g.ordinal: [] for g in gpus}
    for job in sorted(builder.jobs, key=lambda j: j.proc_start_s):
        for ordinal, points in builder.job_points(job).items():
            per_gpu[ordinal].extend(points)
            idle = _state(gpus[ordinal].host.model, hot=gpus[ordinal].host.hot)
            per_gpu[ordinal].append((job.proc_end_s, idle))

    iv = builder.interval_us
    cols: dict[str, list[float | int | bool]] = {name: [] for name in _PIECE_FIELDS}
    offsets = [0]
    procs: list[Proc] = []
    proc_start: list[int] = []
    proc_count: list[int] = []
    energy: list[float] = []
    thermal_base: list[int] = []
    power_base: list[int] = []
    start_ticks: list[int] = []
    for gpu in gpus:
        host = gpu.host
        idle = _state(host.model, hot=host.hot)
        points = [(builder.horizon_s, idle), *per_gpu[gpu.ordinal]]
        if gpu.uuid == events.lost_gpu_uuid:
            points = _overlay(
                points, events.lost_start_s, events.reload_s, lambda s: replace(s, lost=True)
            )
        resets: set[int] = set()
        if host.name == events.reload_host:
            points = _overlay(points, events.reload_s, events.reload_s + 1, lambda s: s)
            resets.add(_tick(events.reload_s, host.phase_us, iv))
        # Freeze at the end of the span: the last state goes on; nothing new starts.
        points = [p for p in points if p[0] < builder.span_end_s]
        ticks: list[tuple[int, State]] = []
        for t, state in points:
            k = _tick(t, host.phase_us, iv)
            if ticks and ticks[-1][0] >= k:
                ticks[-1] = (ticks[-1][0], state)  # a later point on the same tick wins
            else:
                ticks.append((k, state))
        rng = np.random.default_rng([builder.seed, 4, gpu.ordinal])
        uptime_s = float(rng.uniform(2, 40)) * DAY_S
        model = host.model
        amp = model.power_noise_w
        iv_s = iv / 1e6
        iv_ns = iv * 1000
        starts = np.array([k for k, _ in ticks], dtype=np.int64)
        h_before = unit_noise(np.array([gpu.noise_key], dtype=np.uint64), starts - 1, NOISE_POWER)
        e0 = uptime_s * 250.0 * 1000.0  # mJ since the driver loaded
        therm0 = int(rng.uniform(0, 3 * HOUR_S)) * 10**9 if host.hot else 0
        pviol0 = int(rng.uniform(0, HOUR_S)) * 10**9
        cum_p = 0.0
        cum_t = 0
        cum_v = 0
        epoch_h = h_before[0]
        for j, (k, state) in enumerate(ticks):
            if k in resets:
                e0, therm0, pviol0 = 0.0, 0, 0
                cum_p, cum_t, cum_v = 0.0, 0, 0
                epoch_h = h_before[j]
            energy.append(e0 + 1000.0 * iv_s * (cum_p + state.power_w - amp * epoch_h))
            thermal_base.append(therm0 + iv_ns * cum_t)
            power_base.append(pviol0 + iv_ns * cum_v)
            length = (ticks[j + 1][0] - k) if j + 1 < len(ticks) else 0
            cum_p += state.power_w * length
            cum_t += length * state.thermal
            cum_v += length * state.power_capped
            for name in _PIECE_FIELDS:
                cols[name].append(getattr(state, name))
            proc_start.append(len(procs))
            proc_count.append(len(state.procs))
            procs.extend(state.procs)
        offsets.append(offsets[-1] + len(ticks))
        start_ticks.extend(int(k) for k in starts)

    users = sorted({p.user for p in procs})
    user_index = {u: i for i, u in enumerate(users)}
    job_ids = sorted({p.job_id for p in procs if p.job_id is not None})
    job_index = {j: i for i, j in enumerate(job_ids)}
    return Timelines(
        offsets=np.array(offsets, dtype=np.int64),
        start_tick=np.array(start_ticks, dtype=np.int64),
        util_pct=np.array(cols["util_pct"], dtype=np.float64),
        util_amp_pct=np.array(cols["util_amp_pct"], dtype=np.float64),
        mem_util_pct=np.array(cols["mem_util_pct"], dtype=np.float64),
        mem_util_amp_pct=np.array(cols["mem_util_amp_pct"], dtype=np.float64),
        power_w=np.array(cols["power_w"], dtype=np.float64),
        temp_gpu_c=np.array(cols["temp_gpu_c"], dtype=np.float64),
        sm_clock_mhz=np.array(cols["sm_clock_mhz"], dtype=np.int64),
        sm_clock_amp_mhz=np.array(cols["sm_clock_amp_mhz"], dtype=np.int64),
        clock_event_mask=np.array(cols["clock_event_mask"], dtype=np.uint64),
        lost=np.array(cols["lost"], dtype=bool),
        mem_used_bytes=np.array(cols["mem_used_bytes"], dtype=np.int64),
        energy_base_mj=np.array(energy, dtype=np.float64),
        thermal_base_ns=np.array(thermal_base, dtype=np.int64),
        thermal_flag=np.array(cols["thermal"], dtype=np.int64),
        power_viol_base_ns=np.array(power_base, dtype=np.int64),
        power_viol_flag=np.array(cols["power_capped"], dtype=np.int64),
        proc_start=np.array(proc_start, dtype=np.int64),
        proc_count=np.array(proc_count, dtype=np.int64),
        proc_pid=np.array([p.pid for p in procs], dtype=np.uint32),
        proc_user=np.array([user_index[p.user] for p in procs], dtype=np.int32),
        proc_mem_bytes=np.array([p.used_mem_bytes for p in procs], dtype=np.int64),
        proc_job=np.array(
            [job_index[p.job_id] if p.job_id is not None else -1 for p in procs], dtype=np.int32
        ),
        proc_users=users,
        proc_job_ids=job_ids,
    )


_PIECE_FIELDS = (
    "util_pct",
    "util_amp_pct",
    "mem_util_pct",
    "mem_util_amp_pct",
    "power_w",
    "temp_gpu_c",
    "sm_clock_mhz",
    "sm_clock_amp_mhz",
    "clock_event_mask",
    "lost",
    "mem_used_bytes",
    "thermal",
    "power_capped",
)


def _tick(t_s: int, phase_us: int, interval_us: int) -> int:
    """The first tick whose timestamp is at or after t_s."""
    return -((phase_us - t_s * 1_000_000) // interval_us)
