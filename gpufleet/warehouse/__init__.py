"""The warehouse engine: load raw files into DuckDB and build the models of `sql/`.

Plain functions with no Prefect in them (`flows/` wraps them in flows and deployments):
`ingest` loads new raw files, `build` brings the marts up to date, `cycle` does both in
one publish. `docs/warehouse.md` explains how the pieces fit together.
"""
