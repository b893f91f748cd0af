"""The per-host collector: NVML samples into Parquet files (stdlib, nvidia-ml-py, pyarrow only)."""
