"""core/compiled.py: a queryset compiled once, run again with other values, gives what the
ORM gives; the hot reads use it (no compilation per request or run start). The first tests
run its seam (the private query API of Django it uses) against the installed Django: an
upgrade that changes that API fails here first (what to do then: the module's docstring)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.sql.compiler import SQLCompiler

from core.compiled import Compiled, plain_orm, statements
from quotas_app.limits import NAMES, effective, resolve
from quotas_app.models import Quota
from runs_app.selectors import run_row
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import active_path, messages_with_parts, path_ids, session_for_user
from sessions_app.services import lock
from sessions_app.services.sessions import create_session

from .conftest import submitted


@contextmanager
def compiled_models(compiler: type = SQLCompiler) -> Iterator[list[type]]:
    """The model of every query ``compiler`` compiled meanwhile (a SELECT's by default)."""
    seen: list[type] = []
    original = compiler.as_sql

    def recording(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen.append(self.query.model)
        return original(self, *args, **kwargs)

    with mock.patch.object(compiler, "as_sql", recording):
        yield seen


def fields(instance: object, model: type) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in model._meta.concrete_fields}


# -- The seam, against the installed Django --------------------------------------------------
def test_the_seam_s_select_is_the_orms(owner):
    """``select_sql``: the SQL, parameters, columns and conversions of a SELECT, as the ORM
    compiles them; run by hand, they give what the ORM gives (a JSON field decoded)."""
    import django
    from django.db import connection

    from core.compiled import select_sql

    session = _rich_session(owner)
    for queryset, instances in (
        (Session.objects.filter(id=session.id), True),
        (Session.objects.filter(id=session.id).values_list("id", "usage", "owner_id"), False),
        (Session.objects.filter(id=session.id).values("revert", "owner__username"), False),
    ):
        select = select_sql(queryset)
        assert select.params == (session.id,), (django.get_version(), select)
        assert select.instances is instances and select.vendor == connection.vendor
        with connection.cursor() as cursor:
            cursor.execute(select.sql, select.params)
            rows = select.convert(cursor.fetchall())
        if instances:
            assert select.whole_rows and not select.locking
            assert fields(Session.from_db("default", select.names, rows[0]), Session) == fields(
                session, Session
            )
        else:
            assert rows == list(queryset.values_list(*select.names))
    assert select.names == ("revert", "owner__username")
    assert rows == [({"message_id": "msg_x", "snapshot": "abc"}, owner.username)]
    assert not select_sql(Session.objects.defer("title")).whole_rows
    assert not select_sql(Session.objects.select_related("owner")).whole_rows


def test_the_seam_s_update_is_the_orms(owner):
    """``update_sql``: an UPDATE's SQL and parameters, as the ORM compiles them."""
    from django.db import connection
    from django.db.models import F, Value

    from core.compiled import update_sql

    session = create_session(owner=owner)
    sql, params = update_sql(
        Session.objects.filter(id=session.id),
        {"title": Value("renamed"), "context_tokens": F("context_tokens") + 5},
    )
    assert sql.startswith("UPDATE") and session.id in params and "renamed" in params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        assert cursor.rowcount == 1
    stored = Session.objects.get(id=session.id)
    assert (stored.title, stored.context_tokens) == ("renamed", session.context_tokens + 5)
    with pytest.raises(ImproperlyConfigured, match="one table"):
        update_sql(Session.objects.filter(owner__username="x"), {"title": Value("y")})


def test_the_seam_s_insert_types_are_the_databases(db):
    from django.db import connection

    from core.compiled import insert_types

    by_name = {f.name: f for f in Part._meta.concrete_fields}
    types = insert_types((by_name["id"], by_name["order"], by_name["state"]), connection)
    assert types == ("varchar", "integer", "jsonb")
    with pytest.raises(ImproperlyConfigured, match="is not compiled"):
        insert_types((Session._meta.get_field("owner").target_field,), connection)


def test_no_other_module_reaches_into_the_private_query_api():
    """The seam is the only door: no module of the apps but core/compiled.py uses Django's
    compilers or ``UpdateQuery`` (an upgrade then has one file to go through)."""

    from .test_structure import APPS, ROOT, sources

    private = ("django.db.models.sql", "get_compiler(", ".as_sql(", "results_iter(")
    found = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in sources(*APPS)
        if path != ROOT / "core" / "compiled.py" and "migrations" not in path.parts
        for word in private
        if word in path.read_text()
    ]
    assert not found, found


def test_every_statement_of_the_code_compiles_with_the_installed_django(db):
    """Each statement the code keeps compiled (its modules' own; the UPDATEs of a shape
    made at first use are compiled by the run tests) compiles against this Django."""
    from quotas_app import limits
    from runs_app import checkpoint, lifecycle
    from runs_app import selectors as run_selectors
    from sessions_app import selectors as session_selectors
    from sessions_app.api import token_auth

    kept = {
        lock._LOCK,
        lock._LOCK_OF_RUN,
        lock._CLAIM,
        lock._CLAIM_EXPIRED,
        lifecycle._QUEUED,
        run_selectors._RUN,
        session_selectors._OWN_SESSION,
        session_selectors._TREE,
        session_selectors._MESSAGES,
        session_selectors._PARTS,
        checkpoint._SET_HEAD,
        limits._QUOTA_ROWS,
        token_auth._USER_OF_TOKEN,
    }
    code = {s for s in statements() if not s._build.__module__.startswith("tests")}
    assert kept <= code
    for statement in code:
        assert statement._compile()


def test_the_compiled_reads_give_what_the_plain_orm_gives(owner):
    """Every compiled read, called as its code calls it, compiled and by the plain ORM."""
    from quotas_app.limits import effective
    from runs_app import lifecycle
    from sessions_app.api.token_auth import TokenAuthentication

    from .conftest import client_for

    session, ids = _tree(owner)
    run = submitted(owner, "say hi")
    client_for(owner)  # its token
    key = owner.auth_token.key

    def reads() -> list:
        with transaction.atomic():
            locked = [lock.lock_session(session.id), lock.lock_session_of_run(run.id)]
        user, _token = TokenAuthentication().authenticate_credentials(key)
        return [
            *(fields(s, Session) for s in locked),
            fields(session_for_user(owner, session.id), Session),
            fields(run_row(run.id), type(run)),
            path_ids(session.head_id, session.id),
            [
                (fields(m, Message), [fields(p, Part) for p in m.loaded_parts])
                for m in messages_with_parts(ids)
            ],
            effective(owner.pk),
            lifecycle._QUEUED.rows(session_id=run.session_id, run_id="run_other"),
            fields(user, type(user)),
        ]

    compiled = reads()
    with plain_orm():
        assert reads() == compiled


def _rich_session(owner) -> Session:  # noqa: ANN001
    session = create_session(owner=owner, title="rich")
    Session.objects.filter(id=session.id).update(
        usage={"input_tokens": 7, "cost_usd": 0.5},
        revert={"message_id": "msg_x", "snapshot": "abc"},
    )
    return Session.objects.get(id=session.id)


def test_a_session_read_is_the_orms(owner, outsider):
    session = _rich_session(owner)
    assert fields(session_for_user(owner, session.id), Session) == fields(session, Session)
    assert session_for_user(owner, session.id).usage == {"input_tokens": 7, "cost_usd": 0.5}
    for user, sid in ((outsider, session.id), (owner, "ses_nope")):
        with pytest.raises(Exception, match="No such session"):
            session_for_user(user, sid)


def test_the_locks_are_the_orms_and_lock(owner):
    session = _rich_session(owner)
    run = submitted(owner, "say hi")
    with transaction.atomic():
        assert fields(lock.lock_session(session.id), Session) == fields(session, Session)
        assert lock.lock_session_of_run(run.id).id == run.session_id
        assert lock.lock_session_of_run("run_nope") is None
    assert "FOR NO KEY UPDATE" in lock._LOCK._compile().sql
    assert 'FOR NO KEY UPDATE OF "sessions_app_session"' in lock._LOCK_OF_RUN._compile().sql
    assert fields(run_row(run.id), type(run)) == fields(type(run).objects.get(id=run.id), type(run))
    assert run_row("run_nope") is None


@pytest.mark.django_db(transaction=True)
def test_a_lock_outside_a_transaction_is_refused_as_the_orm_refuses_it(owner):
    from django.db.transaction import TransactionManagementError

    session = create_session(owner=owner)
    with pytest.raises(TransactionManagementError):
        lock.lock_session(session.id)


@pytest.mark.django_db(transaction=True)
def test_a_database_without_for_update_is_read_as_the_orm_reads_it(owner, monkeypatch):
    """SQLite (embedded mode): the ORM drops FOR UPDATE there, and refuses nothing outside a
    transaction; so does a compiled read."""
    from django.db import connection

    monkeypatch.setattr(connection.features, "has_select_for_update", False)
    session = create_session(owner=owner)
    orm = Session.objects.select_for_update().filter(id=session.id)
    assert orm.first().id == session.id  # no TransactionManagementError
    compiled = Compiled(lambda id: Session.objects.select_for_update().filter(id=id)[:1], id=str)
    assert compiled.first(id=session.id).id == session.id
    assert "FOR UPDATE" not in compiled._compile().sql


def test_the_limits_are_the_orms(owner, outsider):
    group = Group.objects.create(name="team")
    owner.groups.add(group)
    Quota.objects.create(user=owner, runs_per_minute=3)
    Quota.objects.create(group=group, runs_per_minute=9, cost_per_month=Decimal("12.50"))
    for user in (owner, outsider):
        rows = list(
            Quota.objects.filter(user_id=user.pk)
            .union(Quota.objects.filter(group__user=user.pk))
            .values_list("id", flat=True)
        )
        by_orm = list(Quota.objects.filter(id__in=rows).values("user_id", "group__name", *NAMES))
        own = next((r for r in by_orm if r["user_id"] == user.pk), None)
        assert effective(user.pk) == resolve(own, [r for r in by_orm if r["user_id"] is None])
    assert effective(owner.pk).runs_per_minute == 3
    assert effective(owner.pk).cost_per_month == Decimal("12.50")


def test_a_second_request_compiles_no_read_of_its_session(api, sid):
    assert api.get(f"/api/sessions/{sid}/").status_code == 200
    with compiled_models() as seen:
        assert api.get(f"/api/sessions/{sid}/").status_code == 200
    assert Session not in seen


def test_a_run_request_compiles_neither_its_lock_nor_the_limits(api, sid, owner):
    body = {"messages": [{"role": "user", "content": "say hi"}]}
    other = create_session(owner=owner).id
    assert api.post(f"/api/sessions/{other}/runs/", body, format="json").status_code == 202
    with compiled_models() as seen:
        assert api.post(f"/api/sessions/{sid}/runs/", body, format="json").status_code == 202
    assert Session not in seen and Quota not in seen


def test_a_token_s_user_is_read_without_compiling(api, sid, owner):
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    assert api.get(f"/api/sessions/{sid}/").status_code == 200
    with compiled_models() as seen:
        assert api.get(f"/api/sessions/{sid}/").status_code == 200
    assert User not in seen and Token not in seen


def test_a_token_is_refused_as_drf_refuses_it(api, sid, owner):
    from .conftest import client_for

    stranger = client_for(None)
    stranger.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    refused = stranger.get(f"/api/sessions/{sid}/")
    assert refused.status_code == 401
    assert refused.json()["error"]["message"] == "Invalid token."
    owner.is_active = False
    owner.save()
    inactive = api.get(f"/api/sessions/{sid}/")
    assert inactive.status_code == 401
    assert inactive.json()["error"]["message"] == "User inactive or deleted."


def test_values_that_do_not_reach_the_sql_unchanged_are_refused(db):
    contains = Compiled(lambda title: Session.objects.filter(title__icontains=title), title=str)
    with pytest.raises(ImproperlyConfigured, match="no value's"):
        contains.first(title="x")
    unused = Compiled(lambda id, other: Session.objects.filter(id=id), id=str, other=str)
    with pytest.raises(ImproperlyConfigured, match="reach no parameter"):
        unused.first(id="x", other="y")
    joined = Compiled(lambda id: Session.objects.select_related("owner").filter(id=id), id=str)
    with pytest.raises(ImproperlyConfigured, match="whole rows"):
        joined.first(id="x")
    with pytest.raises(ImproperlyConfigured, match="only str, int and list"):
        Compiled(lambda at: Session.objects.filter(created_at=at), at=float).first(at=1.0)


def test_the_values_must_be_the_named_ones(owner):
    session = create_session(owner=owner)
    by_id = Compiled(lambda id: Session.objects.filter(id=id)[:1], id=str)
    assert by_id.first(id=session.id).id == session.id
    with pytest.raises(TypeError, match="expected the values"):
        by_id.first(pk=session.id)


def _tree(owner) -> tuple[Session, list[str]]:  # noqa: ANN001
    """A session with two branches, parts of several kinds; the ids of one branch's path."""
    session = create_session(owner=owner)
    root = Message.objects.create(session=session, role="user")
    kept = Message.objects.create(session=session, role="assistant", parent=root)
    Message.objects.create(session=session, role="assistant", parent=root)  # the other branch
    leaf = Message.objects.create(session=session, role="user", parent=kept)
    for i, message in enumerate((root, kept, leaf)):
        Part.objects.create(message=message, session=session, order=1, type="text", text=f"t{i}")
        Part.objects.create(
            message=message,
            session=session,
            order=0,
            type="tool",
            call_id=f"c{i}",
            tool="read",
            state={"status": "completed", "output": {"n": i}},
        )
    Session.objects.filter(id=session.id).update(head=leaf)
    session.refresh_from_db()
    return session, [root.id, kept.id, leaf.id]


def test_a_path_is_read_as_the_orm_reads_it(owner):
    session, ids = _tree(owner)
    assert path_ids(session.head_id, session.id) == ids
    by_orm = {m.id: m for m in Message.objects.filter(id__in=ids)}
    parts = Part.objects.filter(message_id__in=ids).order_by("message_id", "order")
    read = messages_with_parts(ids)
    assert [m.id for m in read] == ids
    for message in read:
        assert fields(message, Message) == fields(by_orm[message.id], Message)
        expected = [fields(p, Part) for p in parts if p.message_id == message.id]
        assert [fields(p, Part) for p in message.loaded_parts] == expected
        assert message.loaded_parts[0].state["output"]["n"] in (0, 1, 2)  # JSON decoded
    assert messages_with_parts(["msg_nope"]) == []


def test_a_run_start_compiles_no_read_of_its_path(owner):
    session, ids = _tree(owner)
    assert [m.id for m in active_path(session)] == ids
    with compiled_models() as seen:
        assert [m.id for m in active_path(session)] == ids
    assert Message not in seen and Part not in seen


def test_a_list_value_is_one_array_parameter(owner):
    """An ``__in`` list compiles to one placeholder per item; compiled, it is one array
    parameter whatever its length (``= ANY(%s)``)."""
    sessions = [create_session(owner=owner).id for _ in range(3)]
    by_ids = Compiled(lambda ids: Session.objects.filter(id__in=ids).order_by("id"), ids=list)
    assert '"sessions_app_session"."id" = ANY(%s)' in by_ids._compile().sql
    assert [s.id for s in by_ids.all(ids=sessions)] == sorted(sessions)
    assert [
        s.id for s in by_ids.all(ids=[*sessions, *(f"ses_{i}" for i in range(2000))])
    ] == sorted(sessions)
    assert by_ids.all(ids=[]) == []
    titles = Compiled(
        lambda ids, owner_id: Session.objects.filter(id__in=ids, owner_id=owner_id).values_list(
            "id", "title"
        ),
        ids=list,
        owner_id=int,
    )
    assert sorted(titles.rows(ids=sessions, owner_id=owner.pk)) == sorted(
        Session.objects.filter(id__in=sessions).values_list("id", "title")
    )
    assert titles.rows(ids=sessions, owner_id=owner.pk + 1) == []


def test_a_list_value_on_a_database_without_arrays_is_read_by_the_orm(owner, monkeypatch):
    """SQLite (embedded mode) has no arrays: such a queryset is built and run by the ORM."""
    from django.db import connection

    session, ids = _tree(owner)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    by_ids = Compiled(lambda ids: Message.objects.filter(id__in=ids).order_by("id"), ids=list)
    with compiled_models() as seen:
        assert [m.id for m in by_ids.all(ids=ids)] == sorted(ids)
        assert [m.id for m in by_ids.all(ids=ids[:1])] == ids[:1]
    assert seen.count(Message) == 3, "compiled once to know it, then by the ORM each time"


def compiled_updates() -> AbstractContextManager[list[type]]:
    """The model of every UPDATE compiled meanwhile."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    return compiled_models(SQLUpdateCompiler)


def test_a_run_s_moves_are_compiled_once_and_write_what_the_orm_writes(owner):
    from django.utils import timezone

    from runs_app.lifecycle import move
    from runs_app.models import Run

    first, second = submitted(owner, "say hi"), submitted(owner, "say hi")
    Run.objects.filter(id__in=[first.id, second.id]).update(status=Run.Status.RUNNING)
    at = timezone.now()
    usage = {"input_tokens": 3, "cost_usd": 0.25}
    assert move(first.id, Run.Status.RUNNING, Run.Status.COMPLETED, epoch=0, usage=usage) == 1
    with compiled_updates() as seen:
        moved = move(
            second.id,
            Run.Status.RUNNING,
            Run.Status.COMPLETED,
            epoch=0,
            usage=usage,
        )
    assert moved == 1 and seen == [], "the second move of that shape compiles nothing"
    for run in (first, second):
        run.refresh_from_db()
        assert (run.status, run.usage, run.lease_epoch) == ("completed", usage, 0)
    # A fenced move of a stale epoch writes nothing; None is SQL NULL, a datetime is stored.
    Run.objects.filter(id=second.id).update(status=Run.Status.RUNNING, lease_epoch=2)
    assert move(second.id, Run.Status.RUNNING, Run.Status.ERROR, epoch=1, error=None) == 0
    assert Run.objects.get(id=second.id).status == "running", "a stale execution's end refused"
    assert move(second.id, Run.Status.RUNNING, Run.Status.ERROR, epoch=2, finished_at=at) == 1
    assert move(second.id, Run.Status.ERROR, Run.Status.PENDING, error=None, new_epoch=True) == 1
    second.refresh_from_db()
    assert (second.status, second.finished_at, second.lease_epoch) == ("pending", at, 3)
    assert Run.objects.filter(id=second.id, error__isnull=True).exists(), "NULL, not JSON null"


def test_a_session_s_claim_and_hand_over_are_the_orms(owner):
    from datetime import timedelta

    from django.utils import timezone

    session = create_session(owner=owner)
    assert lock.claim(session.id, "run_a")
    assert not lock.claim(session.id, "run_a", own_ok=False)
    with compiled_updates() as seen:
        assert lock.claim(session.id, "run_a"), "its own"
        assert not lock.claim(session.id, "run_b"), "another's live lease"
        assert not lock.claim(session.id, "run_a", own_ok=False)
    assert Session not in seen
    Session.objects.filter(id=session.id).update(lease_expires_at=timezone.now() - timedelta(1))
    assert lock.claim(session.id, "run_b", own_ok=False), "an expired lease"
    with transaction.atomic():
        locked = lock.lock_session(session.id)
        assert not lock.hand_over(session.id, "run_a", None, locked)
        assert lock.hand_over(session.id, "run_b", None, locked, also={"usage": {"n": 1}})
    stored = Session.objects.get(id=session.id)
    assert (stored.busy_run_id, stored.status, stored.usage) == (None, "idle", {"n": 1})
    assert fields(stored, Session) == fields(locked, Session)


@pytest.mark.django_db(transaction=True)
def test_a_compiled_update_on_a_database_without_it_is_the_orms(owner, monkeypatch):
    """Embedded mode (SQLite): the ORM runs each update."""
    from django.db import connection

    from core.compiled import CompiledUpdate

    session = create_session(owner=owner)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    title = CompiledUpdate(lambda id: Session.objects.filter(id=id), ("title",), id=str)
    with compiled_updates() as seen:
        assert title.update({"title": "one"}, id=session.id) == 1
        assert title.update({"title": "two"}, id=session.id) == 1
    assert len(seen) == 2 and Session.objects.get(id=session.id).title == "two"
    with pytest.raises(TypeError, match="expected the fields"):
        title.update({"model": "x"}, id=session.id)


def test_a_compiled_update_refuses_what_it_cannot_compile(db):
    from core.compiled import CompiledUpdate

    contains = CompiledUpdate(
        lambda title: Session.objects.filter(title__icontains=title), ("model",), title=str
    )
    with pytest.raises(ImproperlyConfigured, match="no value's"):
        contains.update({"model": "x"}, title="y")
    joined = CompiledUpdate(
        lambda name: Session.objects.filter(owner__username=name), ("model",), name=str
    )
    with pytest.raises(ImproperlyConfigured, match="one table"):
        joined.update({"model": "x"}, name="y")


def test_the_run_queued_next_is_the_orms(owner):
    """An end hands the session to the oldest run queued behind it (``_hand_over``)."""
    from runs_app import lifecycle
    from runs_app.models import Run

    holder = submitted(owner, "say hi")
    session = holder.session
    queued = []
    for strategy in ("reject", "enqueue", "interrupt", "enqueue"):
        run = Run(session=session, multitask_strategy=strategy, input=[])
        run.save()
        queued.append(run)
    Run.objects.filter(id=queued[1].id).update(status=Run.Status.CANCELLED)

    def by_orm(run_id: str) -> tuple | None:
        return (
            Run.objects.filter(
                session_id=session.id,
                status="pending",
                multitask_strategy__in=lifecycle.QUEUED_STRATEGIES,
            )
            .exclude(id=run_id)
            .order_by("id")
            .values_list("id", "created_at")
            .first()
        )

    def compiled(run_id: str) -> tuple | None:
        found = lifecycle._QUEUED.rows(session_id=session.id, run_id=run_id)
        return found[0] if found else None

    assert compiled(holder.id) == by_orm(holder.id) == (queued[2].id, queued[2].created_at)
    assert compiled(queued[2].id) == by_orm(queued[2].id) == (queued[3].id, queued[3].created_at)
    Run.objects.filter(id__in=[queued[2].id, queued[3].id]).update(status="cancelled")
    with compiled_models() as seen:
        assert compiled(holder.id) is None
    assert Run not in seen
    assert by_orm(holder.id) is None


def _rows_of(session: Session) -> tuple[list[Message], list[Part]]:
    root = Message(session=session, role="user", run_id=None, completed_at=None)
    reply = Message(session=session, role="assistant", parent=root, tokens={"in": 3}, hidden=True)
    parts = [
        Part(message=root, session=session, order=0, type="text", text="hi\n\tthere"),
        Part(
            message=reply,
            session=session,
            order=1,
            type="tool",
            call_id="c1",
            tool="read",
            state={"status": "completed", "output": {"lines": [1, None, "x"]}},
            data={},
        ),
        Part(message=reply, session=session, order=2, type="text", text="", state=None),
    ]
    return [root, reply], parts


def test_a_checkpoint_s_rows_are_stored_as_they_were_made_without_compiling(owner):
    from django.db.models.sql.compiler import SQLInsertCompiler

    from core.compiled import CompiledInsert

    session = create_session(owner=owner)
    messages, parts = _rows_of(session)
    with mock.patch.object(SQLInsertCompiler, "as_sql", side_effect=AssertionError("compiled")):
        CompiledInsert(Message).insert(messages)
        CompiledInsert(Part).insert(parts)
        CompiledInsert(Part).insert([])
    assert not messages[0]._state.adding and messages[0]._state.db == "default"
    for row in (*messages, *parts):  # stored as they were, read back by the ORM
        assert fields(type(row).objects.get(id=row.id), type(row)) == fields(row, type(row))
    got = {p.order: p for p in Part.objects.filter(session=session)}
    assert got[0].text == "hi\n\tthere" and got[1].state["output"]["lines"] == [1, None, "x"]
    assert got[2].state is None and Part.objects.filter(id=parts[2].id, state__isnull=True).exists()
    # More rows than ``ROWS_EACH``: one statement of arrays (UNNEST), the same rows stored.
    many = [_rows_of(session)[1] for _ in range(3)]
    rows = [p for made in many for p in made]
    for message in {p.message for p in rows}:
        Message.objects.create(id=message.id, session=session, role=message.role)
    with mock.patch.object(SQLInsertCompiler, "as_sql", side_effect=AssertionError("compiled")):
        CompiledInsert(Part).insert(rows)
    assert len(rows) > CompiledInsert.ROWS_EACH
    for row in rows:
        assert fields(Part.objects.get(id=row.id), Part) == fields(row, Part)


def test_usage_records_are_inserted_without_reading_their_ids(owner):
    from quotas_app.models import UsageRecord
    from quotas_app.services import record_usage, usage_record

    session = create_session(owner=owner)
    made = [
        usage_record(
            user_id=owner.pk,
            session_id=session.id,
            run_id="run_x",
            message_id=f"msg_{i}",
            model="scripted",
            usage={"input_tokens": 10 + i, "output_tokens": 5, "cost_usd": "0.25"},
        )
        for i in range(6)
    ]
    record_usage(made[:1])
    record_usage(made[1:])
    stored = UsageRecord.objects.filter(session_id=session.id).order_by("message_id")
    assert [(r.message_id, r.input_tokens, str(r.cost_usd)) for r in stored] == [
        (f"msg_{i}", 10 + i, "0.25000000") for i in range(6)
    ]


@pytest.mark.django_db(transaction=True)
def test_an_insert_on_a_database_without_arrays_is_the_orms(owner, monkeypatch):
    from django.db import connection

    from core.compiled import CompiledInsert
    from quotas_app.models import UsageRecord

    session = create_session(owner=owner)
    messages, _parts = _rows_of(session)
    monkeypatch.setattr(connection, "vendor", "sqlite")
    CompiledInsert(Message).insert(messages)
    assert Message.objects.filter(session=session).count() == 2
    monkeypatch.undo()
    with pytest.raises(ImproperlyConfigured, match="is not compiled"):
        CompiledInsert(UsageRecord).insert([UsageRecord(user=owner, model="m")])
