"""gpufleet: who is using our GPUs, how well, and what the idle time costs."""

__version__ = "0.1.0"
