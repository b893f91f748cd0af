"""The incremental build: the models run on the slice of the warehouse that new samples
touch (`window.py`), and the marts' rows of that slice replaced (`marts.py`, `pieces.py`)."""

from gpufleet.warehouse.build.incremental.run import IncrementalOutcome, build_incrementally

__all__ = ["IncrementalOutcome", "build_incrementally"]
