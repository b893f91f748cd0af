"""Prefect flows: thin wrappers over plain, typed functions (ingest, build, report, serve)."""
