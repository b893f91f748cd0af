"""Prometheus (NVIDIA dcgm-exporter) as a source: the DCGM series of each GPU become the
contract's sample files, and the pods that hold GPUs become allocation rows
(`docs/kubernetes.md`).

- `api.py`: the HTTP API calls, each failure one line naming the query;
- `queries.py`: each contract column's series and the PromQL that reduces it over a step;
- `points.py`: an answer's points as Arrow arrays; `samples.py`: answers -> sample rows;
  `pods.py`: pods -> allocation rows;
- `files.py`: rows cut per sample file, allocation files and the record of imported
  windows; `run.py`: the windows.
"""

from gpufleet.integrations.prometheus.api import PrometheusApi, PrometheusError
from gpufleet.integrations.prometheus.run import ImportResult, import_prometheus

__all__ = ["ImportResult", "PrometheusApi", "PrometheusError", "import_prometheus"]
