"""Statements that every API request or run start makes, compiled by the ORM once.

Django compiles a queryset to SQL each time it runs it: for ``filter(id=...).first()`` of a
session that is about 0.3 ms of CPU, several times what PostgreSQL spends on the statement,
paid by the web process for every request and by the worker for every run it starts.
``Compiled`` builds the queryset once with marker values, keeps the SQL and the compiler's
conversions, and runs that SQL again with the real values: the same statement, the same columns, the
same conversions (a JSON field's decoding), for about a quarter of the CPU
(``tests/test_compiled.py`` checks each result against the ORM's).

Only for querysets whose SQL does not depend on the values (equality lookups, no ``None``):
each value must reach the SQL's parameters unchanged, which the first compilation checks
(the statement's own constants, such as a status it filters on, stay as they are). A
``list`` value (an ``__in`` lookup, whose SQL has one placeholder per item) is one array
parameter on PostgreSQL (``= ANY(%s)``); elsewhere (SQLite) such a queryset is built and run
by the ORM each time.

**The seam.** Everything here that reaches into Django's private query API
(``django.db.models.sql``: the compilers, ``UpdateQuery``, a query's attributes) is in the
three functions of the section "The seam" below: ``select_sql`` (a SELECT's SQL, its
parameters, its columns and the compiler's conversions), ``update_sql`` (an UPDATE's) and
``insert_types`` (the column types of an INSERT, which writes its own SQL). The rest uses
them and the documented API (``Model.from_db``, a field's ``pre_save`` and
``get_db_prep_save``). ``tests/test_compiled.py`` runs the three against the installed
Django and compiles every statement the code holds (``statements``): an upgrade that
changes the private API fails there first (and no other module of the apps may use that
API). Whoever removes this module replaces each statement with the queryset it is built
from (``plain_orm`` runs them so).

What each statement saves, measured against the plain ORM side by side (``./dev bench
--only compiled``; docs/benchmarks.md, "Compiled statements (issue 44)"): a statement stays
here only where it saves at least a fifth of its path's CPU.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.models import Model, QuerySet, Value
from django.db.models.sql.subqueries import UpdateQuery
from django.db.transaction import TransactionManagementError

M = TypeVar("M", bound=Model)
# The values a statement is compiled with, to find them among its parameters. An int may be
# a positive 32-bit field's (Django makes a lookup outside a field's range an empty result,
# not SQL): near its top, far above any id, epoch or count.
_MARKER_INT = 2**31 - 1000
_MARKER_AT = datetime(1901, 1, 1, tzinfo=UTC)  # no lease or stamp is this old


_PLAIN = threading.local()


@contextmanager
def plain_orm() -> Iterator[None]:
    """Meanwhile, in this thread, every statement of this module is built and run by the
    ORM each time, as the code would run it without this module: what it saves is measured
    against that (``bench/compiled.py``), and what it gives is checked against that
    (``tests/test_compiled.py``)."""
    _PLAIN.on = True
    try:
        yield
    finally:
        _PLAIN.on = False


def _plain() -> bool:
    return getattr(_PLAIN, "on", False)


_STATEMENTS: weakref.WeakSet[Any] = weakref.WeakSet()


def statements() -> list[Compiled[Any] | CompiledUpdate[Any]]:
    """Every compiled SELECT and UPDATE made so far (the modules' own, made at import, and
    each shape of an UPDATE made at its first use): what an upgrade must compile again."""
    return list(_STATEMENTS)


# -- The seam: Django's private query API, used here and nowhere else --------------------
@dataclass(frozen=True)
class Select:
    """A SELECT as the ORM compiles it: its SQL and parameters, the names of the columns each
    row holds, and ``convert``, the ORM's conversions of fetched rows (a JSON field's
    decoding)."""

    sql: str
    params: tuple[Any, ...]
    names: tuple[str, ...]  # a model's field attnames, or a values() queryset's keys
    instances: bool  # rows of model instances, not values()
    whole_rows: bool  # every concrete field of one model, nothing joined in
    locking: bool  # FOR UPDATE, where the database has it
    vendor: str
    convert: Callable[[list[tuple]], list[tuple]]


def select_sql(queryset: QuerySet[Any]) -> Select:
    """``queryset``'s SELECT, compiled by the ORM."""
    query = queryset.query
    compiler = query.get_compiler(queryset.db)
    sql, params = compiler.as_sql()
    instances = queryset._fields is None  # not values(), values_list()
    if not instances:
        names = (*query.extra_select, *query.values_select, *query.annotation_select)
        whole = False
    else:
        names = tuple(f.attname for f in queryset.model._meta.concrete_fields)
        whole = query.deferred_loading == (frozenset(), True) and not query.select_related
    connection = compiler.connection
    return Select(
        sql,
        tuple(params),
        names,
        instances,
        whole,
        bool(query.select_for_update and connection.features.has_select_for_update),
        connection.vendor,
        lambda rows: list(compiler.results_iter(results=[rows], tuple_expected=True)),
    )


def update_sql(queryset: QuerySet[Any], values: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """``queryset.update(**values)``'s SQL and parameters, compiled by the ORM; only an
    UPDATE of one table (no join in its filter, no parent model's row)."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    query.annotations = {}
    compiler = query.get_compiler(queryset.db)
    compiler.pre_sql_setup()
    if query.related_updates or query.count_active_tables() != 1:
        raise ImproperlyConfigured("only updates of one table are compiled")
    sql, params = compiler.as_sql()
    return sql, tuple(params)


def insert_types(fields: tuple[Any, ...], connection: Any) -> tuple[str, ...]:
    """The column type of each field, for an INSERT of arrays (``UNNEST(%s::type[])``);
    ImproperlyConfigured for a field whose value the database makes or whose placeholder is
    not ``%s``."""
    for field in fields:
        kind = (field.target_field if field.is_relation else field).get_internal_type()
        if (
            kind not in connection.data_types
            or hasattr(field, "get_placeholder")
            or getattr(field, "db_returning", False)
        ):
            raise ImproperlyConfigured(f"{field.model._meta.label}.{field.name} is not compiled")
    return tuple(f.db_type(connection).split("(")[0] for f in fields)


# -- Statements compiled once ------------------------------------------------------------


def _markers(kinds: dict[str, type], allowed: tuple[type, ...]) -> dict[str, Any]:
    """A marker for each value named in ``kinds`` (a list's: its one item)."""
    markers: dict[str, Any] = {}
    for i, (name, kind) in enumerate(kinds.items()):
        if kind not in allowed:
            names = ", ".join(k.__name__ for k in allowed[:-1])
            raise ImproperlyConfigured(
                f"{name}: only {names} and {allowed[-1].__name__} values are compiled"
            )
        if kind is int:
            markers[name] = _MARKER_INT + i
        elif kind is datetime:
            markers[name] = _MARKER_AT + timedelta(microseconds=i)
        else:
            markers[name] = f"\x00{name}\x00"
    return markers


def _holds_marker(param: Any) -> bool:
    if isinstance(param, str):
        return "\x00" in param
    if isinstance(param, int):
        return param >= _MARKER_INT
    return isinstance(param, datetime) and param < _MARKER_AT + timedelta(seconds=1)


def _named(param: Any, markers: dict[str, Any], sql: str) -> str | None:
    """The value whose marker ``param`` is, or None: a constant of the statement's own. A
    marker that reached it changed (``icontains``'s ``%…%``) is refused."""
    # (An int may come wrapped: psycopg's Int4 for a 32-bit field.)
    named = [n for n, m in markers.items() if isinstance(param, type(m)) and m == param]
    if len(named) == 1:
        return named[0]
    if named or _holds_marker(param):
        raise ImproperlyConfigured(f"a parameter that is no value's: {param!r} in {sql}")
    return None


@dataclass(frozen=True)
class _Ready:
    sql: str
    order: tuple[tuple[str | None, Any], ...]  # each parameter: a value's name, or a constant
    select: Select
    model: type[Model]
    alias: str
    by_orm: bool  # a list value on a database without arrays: the ORM runs it each time


def _as_array(sql: str, index: int) -> str:
    """``sql`` with its ``index``-th placeholder, the one item of an ``IN (%s)``, made one
    array parameter: ``= ANY(%s)``."""
    spans = [m.span() for m in re.finditer(r"%s", sql)]
    start, end = spans[index]
    head = sql[:start]
    if not head.endswith(" IN (") or sql[end : end + 1] != ")":
        raise ImproperlyConfigured(f"a list value that is no IN (…) of its own: {sql}")
    return f"{head[: -len(' IN (')]} = ANY({sql[start:end]}){sql[end + 1 :]}"


class Compiled(Generic[M]):
    """``build(**markers)``'s SQL, run with other values. ``kinds`` names each value and its
    type (``str``, ``int``, or ``list``: an ``__in`` lookup's)."""

    def __init__(self, build: Callable[..., QuerySet[M]], **kinds: type) -> None:
        self._build = build
        self._kinds = kinds
        self._ready: _Ready | None = None
        self._lock = threading.Lock()
        _STATEMENTS.add(self)

    def _compile(self) -> _Ready:
        with self._lock:
            if self._ready is None:
                self._ready = self._compiled()
            return self._ready

    def _compiled(self) -> _Ready:
        markers = _markers(self._kinds, (str, int, list))
        lists = {name for name, kind in self._kinds.items() if kind is list}
        queryset = self._build(
            **{n: [m] if n in lists else m for n, m in markers.items()}  # one item each
        )
        select = select_sql(queryset)
        sql = select.sql
        order: list[tuple[str | None, Any]] = []
        for index, param in enumerate(select.params):
            name = _named(param, markers, sql)
            if name in lists:
                sql = _as_array(sql, index)
            order.append((name, None if name else param))
        if {name for name, _ in order if name} != set(markers):
            raise ImproperlyConfigured(f"values that reach no parameter: {sql}")
        if select.instances and not select.whole_rows:
            raise ImproperlyConfigured("only whole rows of one model are compiled")
        by_orm = bool(lists) and select.vendor != "postgresql"
        return _Ready(sql, tuple(order), select, queryset.model, queryset.db, by_orm)

    def _rows(self, ready: _Ready, values: dict[str, Any]) -> list[tuple]:
        if set(values) != set(self._kinds):
            raise TypeError(f"expected the values {sorted(self._kinds)}")
        if ready.by_orm:  # the same columns, read and converted by the ORM
            return list(self._build(**values).values_list(*ready.select.names))
        params = [values[name] if name else constant for name, constant in ready.order]
        connection = connections[ready.alias]
        # As the ORM: FOR UPDATE (and its refusal outside a transaction) where the database
        # has it; SQLite (embedded mode) has not.
        if ready.select.locking and connection.get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        with connection.cursor() as cursor:
            cursor.execute(ready.sql, params)
            rows = cursor.fetchall()
        # The compiler's conversions, as the ORM applies them (a JSON field's decoding).
        return ready.select.convert(rows)

    def first(self, **values: Any) -> M | None:
        """The first row as a model instance (the queryset's order), or None."""
        if _plain():
            return next(iter(self._build(**values)), None)
        ready = self._ready or self._compile()
        rows = self._rows(ready, values)
        if not rows:
            return None
        return ready.model.from_db(ready.alias, ready.select.names, rows[0])  # type: ignore[return-value]

    def all(self, **values: Any) -> list[M]:
        """Every row as a model instance, in the queryset's order."""
        if _plain():
            return list(self._build(**values))
        ready = self._ready or self._compile()
        build, names = ready.model.from_db, ready.select.names
        return [build(ready.alias, names, row) for row in self._rows(ready, values)]

    def rows(self, **values: Any) -> list[tuple]:
        """A ``values_list()`` queryset's rows, as the ORM gives them."""
        if _plain():
            return list(self._build(**values))
        return self._rows(self._ready or self._compile(), values)

    def dicts(self, **values: Any) -> list[dict[str, Any]]:
        """A ``values()`` queryset's rows, as the ORM gives them."""
        if _plain():
            return list(self._build(**values))
        ready = self._ready or self._compile()
        names = ready.select.names
        return [dict(zip(names, row, strict=True)) for row in self._rows(ready, values)]


class CompiledUpdate(Generic[M]):
    """``build(**keys).update(**set, **fixed)``'s SQL, compiled once, run with other ``keys``
    and other values of the fields ``set`` names (``fixed``: expressions compiled in, such as
    ``F("n") + 1``). ``kinds`` names each key and its type (``str``, ``int`` or
    ``datetime``). The values are prepared for the database as the ORM prepares them (a JSON
    field's, a datetime's); None is NULL. On a database other than PostgreSQL the ORM runs
    each update (embedded mode)."""

    def __init__(
        self,
        build: Callable[..., QuerySet[M]],
        set: tuple[str, ...],  # noqa: A002
        *,
        fixed: dict[str, Any] | None = None,
        **kinds: type,
    ) -> None:
        self._build = build
        self._set = set
        self._fixed = fixed or {}
        self._kinds = kinds
        self._ready: tuple[str, tuple[tuple[str, Any], ...], str] | None = None
        self._by_orm: bool | None = None  # known at the first update
        self._lock = threading.Lock()
        _STATEMENTS.add(self)

    def _compile(self) -> tuple[str, tuple[tuple[str, Any], ...], str]:
        with self._lock:
            if self._ready is None:
                self._ready = self._compiled()
            return self._ready

    def _compiled(self) -> tuple[str, tuple[tuple[str, Any], ...], str]:
        keys = _markers(self._kinds, (str, int, datetime))
        sets = {name: f"\x00set {name}\x00" for name in self._set}
        queryset = self._build(**keys)
        sql, params = update_sql(
            queryset, {**{n: Value(m) for n, m in sets.items()}, **self._fixed}
        )
        meta = queryset.model._meta
        order: list[tuple[str, Any]] = []
        for param in params:
            field = [n for n, m in sets.items() if m == param]
            key = None if field else _named(param, keys, sql)
            if field:
                order.append(("set", meta.get_field(field[0])))
            elif key:
                order.append(("key", key))
            else:
                order.append(("fixed", param))
        named = {v if k == "key" else v.attname for k, v in order if k != "fixed"}
        if named != set(keys) | {meta.get_field(n).attname for n in sets}:
            raise ImproperlyConfigured(f"values that reach no parameter: {sql}")
        return sql, tuple(order), queryset.db

    def update(self, values: dict[str, Any], **keys: Any) -> int:
        """The number of rows updated: ``values`` (every field of ``set``) where ``keys``."""
        if set(values) != set(self._set) or set(keys) != set(self._kinds):
            raise TypeError(f"expected the fields {self._set} and the keys {sorted(self._kinds)}")
        if self._by_orm is None:
            self._by_orm = connections[self._build(**keys).db].vendor != "postgresql"
        if self._by_orm or _plain():
            return self._build(**keys).update(**values, **self._fixed)
        sql, order, alias = self._ready or self._compile()
        connection = connections[alias]
        params = []
        for kind, what in order:
            if kind == "key":
                params.append(keys[what])
            elif kind == "set":
                value = values[what.name] if what.name in values else values[what.attname]
                params.append(None if value is None else what.get_db_prep_save(value, connection))
            else:
                params.append(what)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.rowcount


def update_of_shape(
    cache: dict[Hashable, CompiledUpdate[Any]],
    shape: Hashable,
    make: Callable[[], CompiledUpdate[Any]],
) -> CompiledUpdate[Any]:
    """The compiled update for ``shape`` (which fields, which filters), made at its first use.
    Two threads that make one at once make the same; the first kept is used from then on."""
    found = cache.get(shape)
    return found if found is not None else cache.setdefault(shape, make())


class CompiledInsert(Generic[M]):
    """``bulk_create(rows)`` compiled once, for a model whose rows carry their primary key
    (made in Python), or whose database-made ids nobody reads (``ids=False``: the rows are
    left without them). On PostgreSQL a few rows are one ``VALUES`` row each (a statement
    for each count, up to ``ROWS_EACH``), more are arrays — the form Django itself takes
    there for several rows, ``INSERT … SELECT * FROM UNNEST(%s::type[], …)`` — whose
    dumping costs more than a few rows' values; the values are prepared as the ORM prepares
    them (``pre_save``, then ``get_db_prep_save``). Elsewhere (SQLite) ``bulk_create``."""

    ROWS_EACH = 4

    def __init__(self, model: type[M], *, ids: bool = True) -> None:
        self._model = model
        self._ids = ids
        self._sql: dict[int, str] = {}  # by row count; 0: the arrays
        self._fields: tuple[Any, ...] | None = None

    def _compile(self, connection: Any, count: int) -> str:
        meta = self._model._meta
        fields = tuple(
            f for f in meta.concrete_fields if self._ids or not getattr(f, "db_returning", False)
        )
        types = insert_types(fields, connection)
        quote = connection.ops.quote_name
        head = f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)})"
        if count:
            row = f"({', '.join(['%s'] * len(fields))})"
            sql = f"{head} VALUES {', '.join([row] * count)}"
        else:
            sql = f"{head} SELECT * FROM UNNEST({', '.join(f'(%s)::{t}[]' for t in types)})"
        self._fields = fields
        return self._sql.setdefault(count, sql)

    def insert(self, rows: list[M]) -> None:
        if not rows:
            return
        alias = router.db_for_write(self._model)
        connection = connections[alias]
        if connection.vendor != "postgresql" or _plain():
            self._model._default_manager.using(alias).bulk_create(rows)
            return
        count = len(rows) if len(rows) <= self.ROWS_EACH else 0
        sql = self._sql.get(count) or self._compile(connection, count)
        fields = self._fields or ()
        if count:
            params = [
                field.get_db_prep_save(field.pre_save(row, True), connection)
                for row in rows
                for field in fields
            ]
        else:
            params = [
                [field.get_db_prep_save(field.pre_save(row, True), connection) for row in rows]
                for field in fields
            ]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
        for row in rows:  # as bulk_create leaves them: stored
            row._state.adding = False
            row._state.db = alias
