"""`gpufleet build`: the SQL models of `sql/` run into the marts, fully or incrementally,
with what a build keeps for the next one (the state, the ids) and its memory cap."""

from gpufleet.warehouse.build.run import BuildResult, build, build_models

__all__ = ["BuildResult", "build", "build_models"]
