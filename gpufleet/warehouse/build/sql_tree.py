"""The relations a model's SQL reads, from its syntax tree (sqlglot, DuckDB's dialect).

A relation is read where a table stands (`from x`, `join x`, `x` in a subquery's `from`),
or where a table macro takes it as an argument (`stable_ids(names, known)` reads `names`
and `known` with `query_table`). A name that is a CTE visible at that place is no relation
(a CTE is visible after its own definition in its `with`, and in the query the `with`
belongs to). `rename_relations` swaps relation names in the text itself, at the places
the tree gives, so that everything else (comments, layout, DuckDB syntax) stays as written.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping

import sqlglot
from sqlglot import exp

DIALECT = "duckdb"


def parse(sql: str, *, source: str = "query") -> exp.Expr:
    """The syntax tree of one select; a ValueError naming `source` if it is no such."""
    try:
        tree = sqlglot.parse_one(sql, dialect=DIALECT)
    except sqlglot.errors.ParseError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{source}: not a query DuckDB's dialect parses: {first}") from error
    return tree


def _visible_ctes(node: exp.Expr) -> set[str]:
    """The CTE names visible where `node` stands (lowercase)."""
    names: set[str] = set()
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            ctes = list(parent.expressions)
            before = next(n for n, cte in enumerate(ctes) if cte is child)
            seen = ctes if parent.args.get("recursive") else ctes[:before]
            names |= {cte.alias_or_name.lower() for cte in seen}
        else:
            for value in parent.args.values():
                if isinstance(value, exp.With) and value is not child:
                    names |= {cte.alias_or_name.lower() for cte in value.expressions}
        child, parent = parent, parent.parent
    return names


def _relation_names(tree: exp.Expr) -> Iterator[tuple[str, exp.Identifier, bool]]:
    """Each place a relation is read: its name as written ('schema.name' when qualified,
    lowercase), the identifier of its last part, and whether it is a table without an alias
    (columns may then name it: `run_pieces.day`)."""
    for table in tree.find_all(exp.Table):
        name = table.this
        if isinstance(name, exp.Identifier):
            parts = [part for part in (table.catalog, table.db) if part]
            if not parts and name.this.lower() in _visible_ctes(table):
                continue
            yield ".".join([*parts, name.this]).lower(), name, not table.alias
        elif isinstance(name, exp.Anonymous):  # a table macro: its arguments name relations
            for argument in name.expressions:
                if isinstance(argument, exp.Column) and not argument.table:
                    identifier = argument.this
                    if identifier.this.lower() not in _visible_ctes(table):
                        yield identifier.this.lower(), identifier, False


@functools.lru_cache(maxsize=256)
def _read_by(
    sql: str, source: str
) -> tuple[tuple[tuple[str, int, int, bool], ...], frozenset[str]]:
    """Each relation read (its name, where the name starts and ends in `sql`, whether the
    table has no alias) and the table macros called: one parse per text (a model is
    rendered once per slice of a build, and every build finds the models again)."""
    tree = parse(sql, source=source)
    spans = tuple(
        (name, identifier.meta["start"], identifier.meta["end"] + 1, bare)
        for name, identifier, bare in _relation_names(tree)
    )
    called = frozenset(
        table.this.name.lower()
        for table in tree.find_all(exp.Table)
        if isinstance(table.this, exp.Anonymous)
    )
    return spans, called


def relations_read(
    sql: str, *, source: str = "query", macros: Mapping[str, frozenset[str]] | None = None
) -> frozenset[str]:
    """The relations `sql` reads, less its CTEs: names lowercase, 'schema.name' where the
    query qualifies them; with `macros` (macro_reads), those the table macros it calls read
    themselves."""
    spans, called = _read_by(sql, source)
    own = frozenset(span[0] for span in spans)
    return own.union(*(macros[name] for name in called if macros and name in macros))


def macro_reads(sql: str, *, source: str = "macros") -> dict[str, frozenset[str]]:
    """Per table macro the file `sql` creates (`create macro m(rows) as table select ...`),
    the relations its body reads besides those its arguments name."""
    return dict(_macro_reads(sql, source))


@functools.lru_cache(maxsize=16)
def _macro_reads(sql: str, source: str) -> tuple[tuple[str, frozenset[str]], ...]:
    """macro_reads, parsed once per text: every build finds the models again."""
    try:
        statements = sqlglot.parse(sql, dialect=DIALECT)
    except sqlglot.errors.ParseError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{source}: not SQL DuckDB's dialect parses: {first}") from error
    reads: dict[str, frozenset[str]] = {}
    for statement in statements:
        if not isinstance(statement, exp.Create) or statement.kind != "MACRO":
            continue
        signature, body = statement.this, statement.expression
        if not isinstance(signature, exp.UserDefinedFunction) or not isinstance(body, exp.Query):
            continue  # a scalar macro reads no relation
        parameters = {parameter.name.lower() for parameter in signature.expressions}
        names = {name for name, _, _ in _relation_names(body)} - parameters
        reads[signature.this.name.lower()] = frozenset(names)
    return tuple(reads.items())


def rename_relations(sql: str, renames: Mapping[str, str], *, source: str = "query") -> str:
    """`sql` reading relation `renames[name]` wherever it reads relation `name` (an
    unqualified name, any case); string literals, columns and CTEs of the same name stay.
    A table without an alias keeps its old name as one (`from run_pieces` becomes `from
    _inc_pieces as run_pieces`), for the columns that name it."""
    wanted = {name.lower(): other for name, other in renames.items()}
    spans = [span for span in _read_by(sql, source)[0] if span[0] in wanted]
    for name, start, end, bare in sorted(spans, key=lambda span: span[1], reverse=True):
        other = f"{wanted[name]} as {sql[start:end]}" if bare else wanted[name]
        sql = sql[:start] + other + sql[end:]
    return sql
