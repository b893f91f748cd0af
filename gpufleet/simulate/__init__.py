"""The fleet simulator: sample files, reference files and allocations as a real fleet's
collectors and scheduler would write them (`gpufleet simulate`, `demo`, `bench`, tests).

Import it through `gpufleet.simulate.fleet`, the entry module; its docstring maps the rest."""
