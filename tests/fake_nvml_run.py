"""Run the `gpufleet` command line on the fake NVML, as a real process:

    python -m tests.fake_nvml_run SCENARIO.json -- [gpufleet arguments...]
    python -m tests.fake_nvml_run scenario.json -- --data-dir /tmp/d collect --interval 0.2

It installs `tests.fake_nvml.FakeNvml` (from the JSON scenario) over pynvml's functions and
then calls `gpufleet.cli.main`, so the collector itself carries no test hook.
"""

from __future__ import annotations

import sys

from tests.fake_nvml import FakeNvml


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] != "--":
        print("usage: python -m tests.fake_nvml_run SCENARIO.json -- ARGS...", file=sys.stderr)
        return 2
    FakeNvml.from_json(argv[0]).install(setattr)
    from gpufleet.cli import main as gpufleet_main

    return gpufleet_main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
