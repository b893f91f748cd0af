"""The warehouse engine: load raw files into DuckDB and build the models of `sql/`.

Plain functions with no Prefect in them (`flows/` wraps them in flows and deployments), in
one package per stage: `ingest` loads new raw files (`raw` lists them, records those
loaded and quarantines the bad ones; `refs` reads the reference files), `lake`
compacts them and keeps the samples of built days in their files, `build` brings the marts
up to date, `publish` opens the warehouse to one writer and to readers; `base` is what they
all share, and `cycle` ingests and builds in one publish. `docs/warehouse.md` explains how
the pieces fit together.
"""
