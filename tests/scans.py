"""Counting the rows DuckDB reads, for tests that a step reads what changed, not the history.

`ScanCounter` wraps a real DuckDB connection: every statement run through it is profiled
(DuckDB's JSON profile names each table scan and the rows it read, after the zone maps
skipped the row groups they could), and the rows read are summed per table. No timing: a
test asserts how many rows a step read.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb


class ScanCounter:
    """A connection that counts the rows each table scan reads (`rows`, by the name DuckDB
    gives the table: `database.schema.table`) and keeps the statements run through it
    (`statements`). Pass it where a connection is expected."""

    def __init__(self, con: duckdb.DuckDBPyConnection, profile: Path) -> None:
        self._con = con
        self._profile = profile
        self.rows: Counter[str] = Counter()
        self.statements: list[str] = []
        con.execute("pragma enable_profiling = 'json'")
        con.execute("pragma profiling_output = ?", [str(profile)])

    def execute(self, *args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        # A statement's profile is written once its result is read: the one before it now.
        self._count()
        self.statements.append(" ".join(str(args[0]).split()) if args else "")
        result = self._con.execute(*args, **kwargs)
        self._count()
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def read(self, table: str) -> int:
        """The rows read of tables whose name ends with `table` (`main.gpu_hourly`)."""
        self._count()
        return sum(rows for name, rows in self.rows.items() if name.endswith(table))

    def _count(self) -> None:
        if not self._profile.exists():
            return
        profile = json.loads(self._profile.read_text())
        self._profile.unlink()
        self._add(profile)

    def _add(self, node: object) -> None:
        if isinstance(node, list):
            for child in node:
                self._add(child)
        elif isinstance(node, dict):
            if node.get("type") == "TABLE_SCAN" and "rows_scanned" in node:
                table = node.get("extra_info", {}).get("Table", "")
                self.rows[str(table)] += int(node["rows_scanned"])
            self._add(node.get("operator", []))
            self._add(node.get("children", []))
