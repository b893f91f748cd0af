"""The `build` flow: (re)build every SQL model in one published warehouse transaction."""

from __future__ import annotations

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.models import BuildResult, build_models
from flows.warehouse import DEFAULT_LOCK_TIMEOUT_S, write_transaction
from gpufleet.config import Config, load_config


def build(config: Config, *, lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> BuildResult:
    """Build the models on a private copy of the warehouse and publish it (no Prefect)."""
    with write_transaction(config, lock_timeout_s=lock_timeout_s) as con:
        return build_models(con, config)


@task(name="build-models", cache_policy=NO_CACHE)
def build_models_task(config: Config) -> BuildResult:
    """Run sql/ (staging, intermediate, marts) into the warehouse."""
    return build(config)


@flow(name="build", log_prints=False)
def build_flow(data_dir: str = "data", config_path: str | None = None) -> BuildResult:
    """Rebuild the marts from the warehouse's raw tables."""
    config = load_config(config_path=config_path, data_dir=data_dir)
    return build_models_task(config)


if __name__ == "__main__":
    print(build_flow())
