"""A real Slurm for the tests: munge, MariaDB, slurmdbd, slurmctld and two slurmd.

Debian 12's Slurm 22.05 with accounting, started under one temporary directory: its own
munge key and socket, its own MariaDB data directory on a loopback port, free ports for
slurmdbd, slurmctld and the two slurmd (`gpu-node01`, `gpu-node02`: one host, Debian builds
with multiple-slurmd), each node with four fake A100s (character devices made with mknod
outside /dev, gres.conf `AutoDetect=off`). Nothing of the host's own Slurm or MariaDB is
used or changed, except that the packages are installed when missing (apt-get) and two
Unix users, `gf-alice` and `gf-bob`, are created to submit jobs as.

`slurm_stack(root)` starts it (about 8 s once installed) and stops every process it
started when the block exits. `python -m tests.slurm_stack DIR` starts one by hand and
prints how to reach it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_ports

PACKAGES = (
    "slurmctld",
    "slurmd",
    "slurmdbd",
    "slurm-client",
    "munge",
    "mariadb-server",
    "slurm-wlm-mysql-plugin",
    "slurm-wlm-basic-plugins",
)
# The programs the stack runs; any missing one means the packages are installed.
PROGRAMS = ("munged", "mariadbd", "mariadb-install-db", "slurmdbd", "slurmctld", "slurmd")

CLUSTER = "gpufleet"
NODES = ("gpu-node01", "gpu-node02")
GPUS_PER_NODE = 4
PARTITION = "gpu"
USERS = ("gf-alice", "gf-bob")
ACCOUNTS = {"gf-alice": "vision", "gf-bob": "speech"}  # each user's account
NVIDIA_MAJOR = 195  # the character-device major of /dev/nvidia*


class SlurmUnavailable(RuntimeError):
    """The stack cannot be installed or started on this machine; the message says why."""


def ensure_installed() -> None:
    """Install Debian's Slurm, munge and MariaDB when one of the programs is missing, and
    the two users; needs root (as `make slurm` does it with sudo)."""
    missing = [name for name in PROGRAMS if not _which(name)]
    if missing:
        if os.geteuid() != 0:
            raise SlurmUnavailable(
                f"Slurm is needed for these tests (missing {', '.join(missing)}): run "
                "'make slurm' (apt-get install " + " ".join(PACKAGES) + ")"
            )
        environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for command in (
            ["apt-get", "update", "-qq"],
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
        ):
            done = subprocess.run(command, env=environment, capture_output=True, text=True)
            if done.returncode != 0:
                raise SlurmUnavailable(f"{' '.join(command)} failed: {done.stderr.strip()}")
    for user in USERS:
        if _run(["id", "-u", user], check=False).returncode != 0:
            if os.geteuid() != 0:
                raise SlurmUnavailable(f"user {user} is missing: run 'make slurm' as root")
            _run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user])


def _which(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def _run(
    command: list[str], *, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    if check and done.returncode != 0:
        raise SlurmUnavailable(
            f"{' '.join(command)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}"
        )
    return done


@dataclass
class SlurmStack:
    """A running stack: its directory, and the environment its clients need."""

    root: Path
    env: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)  # daemon -> pid, in start order

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def command(self, *args: str, user: str | None = None, check: bool = True) -> str:
        """Run a Slurm client (sacct, squeue, sbatch, ...) against this stack, as `user`."""
        prefix = ["runuser", "-u", user, "--"] if user else []
        done = subprocess.run(
            [*prefix, *args], capture_output=True, text=True, env=self.env, timeout=60
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(args)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}"
            )
        return done.stdout

    def submit(
        self,
        user: str,
        script: str,
        *,
        gpus: int,
        node: str | None = None,
        array: str | None = None,
        account: str | None = None,
    ) -> str:
        """sbatch a shell command as `user` in its account with `gpus` A100s on one node;
        returns the job id (an array's job id)."""
        args = [
            "sbatch",
            "--parsable",
            f"--account={account or ACCOUNTS[user]}",
            f"--partition={PARTITION}",
            "--nodes=1",
            "--ntasks=1",
            f"--gres=gpu:a100:{gpus}",
            "--chdir=/tmp",
            "--output=/dev/null",
            f"--wrap={script}",
        ]
        if node:
            args.append(f"--nodelist={node}")
        if array:
            args.append(f"--array={array}")
        return self.command(*args, user=user).strip().split(";")[0]

    def wait(self, what: str, ready: Callable[[], object], timeout_s: float = 30.0) -> None:
        """Poll `ready()` until it holds."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        # The stack's folder goes with it: the newest log's last lines say why.
        logs = sorted((self.root / "log").glob("*.log"), key=lambda path: path.stat().st_mtime)
        last = logs[-1].read_text(errors="replace").splitlines()[-5:] if logs else []
        said = f"; {logs[-1].name}: " + " | ".join(last) if last else ""
        raise SlurmUnavailable(f"timed out waiting for {what} ({self.root / 'log'}){said}")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _configure(root: Path) -> dict[str, str]:
    """Write every configuration file; returns the clients' environment."""
    db_port, dbd_port, ctld_port = free_ports(3)
    node_ports = free_ports(len(NODES), consecutive=True)
    for name in ("etc", "log", "run", "ctld", "spool", "dev", "munge", "db"):
        (root / name).mkdir(parents=True, exist_ok=True)
    (root / "munge").chmod(0o755)  # the socket must be reachable by the submitting users
    key = root / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    for index in range(GPUS_PER_NODE):
        device = root / "dev" / f"nvidia{index}"
        if not device.exists():
            os.mknod(device, 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, index))
    auth = f"AuthType=auth/munge\nAuthInfo=socket={root}/munge/munge.sock\n"
    _write(
        root / "etc" / "slurm.conf",
        f"""ClusterName={CLUSTER}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
{auth}CredType=cred/munge
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/node-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/node-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=1
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={dbd_port}
AccountingStoragePass={root}/munge/munge.sock
AccountingStorageTRES=gres/gpu,gres/gpu:a100
AccountingStorageEnforce=associations
GresTypes=gpu
NodeName={_hostlist(NODES)} NodeAddr=127.0.0.1 Port=[{node_ports[0]}-{node_ports[-1]}] \
CPUs=8 RealMemory=8000 Gres=gpu:a100:{GPUS_PER_NODE} State=UNKNOWN
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""",
    )
    _write(
        root / "etc" / "gres.conf",
        f"AutoDetect=off\nNodeName={_hostlist(NODES)} Name=gpu Type=a100 "
        f"File={root}/dev/nvidia[0-{GPUS_PER_NODE - 1}]\n",
    )
    _write(
        root / "etc" / "slurmdbd.conf",
        f"""{auth}DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
PidFile={root}/run/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
""",
        mode=0o600,
    )
    (root / "etc" / "db_port").write_text(str(db_port))
    return {
        **os.environ,
        "SLURM_CONF": str(root / "etc" / "slurm.conf"),
        "PATH": os.environ.get("PATH", "") + ":/usr/sbin:/usr/bin",
    }


def _hostlist(names: tuple[str, ...]) -> str:
    """`gpu-node[01-02]` for consecutive numbered names sharing a prefix."""
    prefix = names[0].rstrip("0123456789")
    digits = [name[len(prefix) :] for name in names]
    return f"{prefix}[{digits[0]}-{digits[-1]}]"


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _start(stack: SlurmStack) -> None:
    root, env = stack.root, stack.env
    _run(
        [
            _which("munged") or "munged",
            "--force",
            f"--key-file={root}/munge/munge.key",
            f"--socket={root}/munge/munge.sock",
            f"--pid-file={root}/run/munged.pid",
            f"--log-file={root}/log/munged.log",
            f"--seed-file={root}/munge/seed",
        ]
    )
    stack.pids["munged"] = _read_pid(root / "run" / "munged.pid") or 0
    db_port = (root / "etc" / "db_port").read_text()
    _run(
        [
            _which("mariadb-install-db") or "mariadb-install-db",
            "--no-defaults",
            f"--datadir={root}/db",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
    )
    mariadb = subprocess.Popen(
        [
            _which("mariadbd") or "mariadbd",
            "--no-defaults",
            f"--datadir={root}/db",
            f"--socket={root}/run/mysql.sock",
            f"--port={db_port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={root}/run/mariadb.pid",
            "--user=root",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=64M",
            f"--log-error={root}/log/mariadb.log",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    stack.pids["mariadbd"] = mariadb.pid
    stack.wait("MariaDB", lambda: _port_open(int(db_port)))
    for daemon, args in (("slurmdbd", []), ("slurmctld", ["-f", str(stack.conf)])):
        _run([_which(daemon) or daemon, *args], env=env)
        pid_file = root / "run" / f"{daemon}.pid"
        stack.wait(f"{daemon}'s pid file", lambda f=pid_file: _read_pid(f) is not None)
        stack.pids[daemon] = _read_pid(pid_file) or 0
        if daemon == "slurmdbd":
            stack.wait("slurmdbd", lambda: _sacctmgr_answers(stack), timeout_s=60)
            _register(stack)
    ping = ["scontrol", "ping"]
    stack.wait("slurmctld", lambda: _run(ping, check=False, env=env).returncode == 0)
    for node in NODES:
        _run([_which("slurmd") or "slurmd", "-f", str(stack.conf), "-N", node], env=env)
        pid_file = root / "run" / f"node-{node}.pid"
        stack.wait(f"slurmd {node}", lambda f=pid_file: _read_pid(f) is not None)
        stack.pids[f"slurmd {node}"] = _read_pid(pid_file) or 0
    stack.wait("the nodes to be idle", lambda: _nodes_idle(stack), timeout_s=60)


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _sacctmgr_answers(stack: SlurmStack) -> bool:
    done = _run(["sacctmgr", "-n", "-P", "show", "cluster"], check=False, env=stack.env)
    return done.returncode == 0


def _register(stack: SlurmStack) -> None:
    """The cluster, one account per user, and the users in them."""
    sacctmgr = ["sacctmgr", "-i"]
    _run([*sacctmgr, "add", "cluster", CLUSTER], env=stack.env)
    for account in sorted(set(ACCOUNTS.values())):
        _run([*sacctmgr, "add", "account", account, f"cluster={CLUSTER}"], env=stack.env)
    for user, account in ACCOUNTS.items():
        _run([*sacctmgr, "add", "user", user, f"account={account}"], env=stack.env)


def _nodes_idle(stack: SlurmStack) -> bool:
    done = _run(["sinfo", "-h", "-N", "-o", "%N %t"], check=False, env=stack.env)
    states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
    return all(states.get(node) == "idle" for node in NODES)


def _stop(stack: SlurmStack) -> None:
    """Cancel the jobs, then stop each daemon (nodes first, munge last) and the processes
    left behind (found by this stack's SLURM_CONF in their environment)."""
    with contextlib.suppress(Exception):
        stack.command("scancel", f"--partition={PARTITION}", check=False)
        stack.wait("the jobs to end", lambda: not _our_processes(stack, jobs_only=True), 10)
    for name in reversed(list(stack.pids)):
        pid = stack.pids[name]
        if pid:
            _terminate(pid)
    for pid in _our_processes(stack, jobs_only=False):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _terminate(pid: int, timeout_s: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _our_processes(stack: SlurmStack, *, jobs_only: bool) -> list[int]:
    """Processes whose environment names this stack's slurm.conf, but the daemons: with
    `jobs_only`, the slurmstepd and job processes alone (not slurmctld's slurmscriptd)."""
    marker = f"SLURM_CONF={stack.conf}".encode()
    skipped = {*stack.pids.values(), os.getpid()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in skipped:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker not in environ:
            continue
        is_job = command.startswith(b"slurmstepd") or any(
            item.startswith(b"SLURM_JOB_ID=") for item in environ
        )
        if is_job or not jobs_only:
            found.append(int(entry.name))
    return found


@contextlib.contextmanager
def slurm_stack(root: Path | None = None) -> Iterator[SlurmStack]:
    """Install if needed, configure and start the stack under `root` (default: a new
    temporary directory, removed at the end); stop it at the end."""
    ensure_installed()
    if os.geteuid() != 0:
        raise SlurmUnavailable("the Slurm stack's daemons run as root: run the tests as root")
    with contextlib.ExitStack() as cleanup:
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="gpufleet-slurm-"))
            cleanup.callback(shutil.rmtree, root, ignore_errors=True)
        root.chmod(0o755)  # the submitting users read slurm.conf and reach munge's socket
        stack = SlurmStack(root, _configure(root))
        try:
            _start(stack)
            yield stack
        finally:
            _stop(stack)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the stack on `kill`
    directory = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/gpufleet-slurm").absolute()
    started = time.monotonic()
    with slurm_stack(directory) as running:
        print(f"up in {time.monotonic() - started:.1f} s; export SLURM_CONF={running.conf}")
        print("Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
