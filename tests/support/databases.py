"""Migrated PostgreSQL databases for tests, cloned from a template once and then reused.

Each test gets a database as the migration leaves it. Cloning one (``CREATE DATABASE
... TEMPLATE``) and dropping it cost PostgreSQL about 0.3 s of CPU, nearly all in the
kernel: 400 tests paid two minutes of CPU on this machine's two cores. So a database a
test is done with is emptied and kept for the next test of the same process, after
River's pooled test schemas. Emptied means as the clone was: its rows gone
(``TRUNCATE``), its sequences restarted, its planner statistics as the template's (the
watchdog analyzes a table without statistics, ``scheduler.storage.statistics``; a table
analyzed empty is planned at its size, one never analyzed as ten pages) and its activity
counters cleared. It is renamed first, so that whatever still holds the old name (a
process the test left, a pool in this one) cannot reach it, as it could not a dropped one.

A database whose shape differs from its template's is dropped instead, and the next test
gets a new clone: its relations (with their owners, privileges, options and row counts
as planned), columns and their defaults, constraints, triggers, functions, types and
schemas, the migration's revision, the database's own settings. Not compared: the bodies
of functions, the definitions of constraints and indexes (only their names), whether a
trigger is enabled; no test changes them.
"""

import hashlib
import uuid

import sqlalchemy
from sqlalchemy import text

from tests.support import services

# The shape the module's docstring lists, as one text.
_SHAPE = text(
    """
    SELECT concat_ws('|',
      (SELECT string_agg(concat_ws(':', c.relname, c.relkind, c.relnatts, c.relowner,
                                   c.relacl::text, c.reloptions::text), ','
              ORDER BY c.relname, c.relkind)
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
          AND n.nspname NOT LIKE 'pg_temp_%' AND n.nspname NOT LIKE 'pg_toast_temp_%'),
      (SELECT string_agg(concat_ws(':', a.attrelid::regclass, a.attname, a.atttypid,
                                   a.attnotnull, a.atthasdef, a.attisdropped), ','
              ORDER BY a.attrelid::regclass::text, a.attnum)
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0),
      (SELECT string_agg(pg_get_expr(d.adbin, d.adrelid), ',' ORDER BY d.adrelid, d.adnum)
         FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
        WHERE c.relnamespace = 'public'::regnamespace),
      (SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
        WHERE connamespace NOT IN ('pg_catalog'::regnamespace, 'information_schema'::regnamespace)),
      (SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger WHERE NOT tgisinternal),
      (SELECT string_agg(proname, ',' ORDER BY proname) FROM pg_proc
        WHERE pronamespace = 'public'::regnamespace),
      (SELECT string_agg(typname, ',' ORDER BY typname) FROM pg_type
        WHERE typnamespace = 'public'::regnamespace),
      (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace
        WHERE nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'),
      (SELECT string_agg(version_num, ',' ORDER BY version_num) FROM alembic_version),
      (SELECT string_agg(array_to_string(setconfig, ','), ';' ORDER BY setrole)
         FROM pg_db_role_setting
        WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())))
    """
)
_TABLES = text(
    "SELECT c.oid::regclass::text FROM pg_class c"
    " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"
    " AND NOT c.relispartition AND c.relname <> 'alembic_version' ORDER BY 1"
)
_SEQUENCES = text(
    "SELECT c.oid::regclass::text FROM pg_class c"
    " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S' ORDER BY 1"
)
# What the test left connected (a worker, a stray pool), ended and waited for: a backend
# writes its activity counters as it exits.
_OTHERS = text("SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = :name")


# The tables the template has analyzed (empty): analyzed again once emptied.
_ANALYZED = text(
    "SELECT c.oid::regclass::text FROM pg_class c"
    " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.reltuples >= 0"
    " ORDER BY 1"
)
# How the planner sizes each table (an index's size is read from its file): as the
# template's once emptied, or not reused.
_SIZES = text(
    "SELECT string_agg(concat_ws(':', c.relname, c.reltuples, c.relpages), ','"
    " ORDER BY c.relname) FROM pg_class c"
    " WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')"
)


def shape(conn: sqlalchemy.Connection) -> str:
    """A digest of what a test may change that emptying does not undo."""
    return hashlib.sha256(conn.execute(_SHAPE).scalar_one().encode()).hexdigest()


class DatabasePool:
    """The databases of one test process: ``take`` one, as its template is, and ``give``
    it back once the test is done with it."""

    def __init__(self, admin: sqlalchemy.Engine, template: str):
        self.admin = admin
        self.template = template
        engine = _engine(template)
        try:
            with engine.connect() as conn:
                self.shape = shape(conn)
                self.analyzed = list(conn.execute(_ANALYZED).scalars())
                self.sizes = conn.execute(_SIZES).scalar_one()
        finally:
            engine.dispose()
        self.free: list[str] = []

    def take(self) -> str:
        if self.free:
            return self.free.pop()
        return services.create_database(self.admin, template=self.template)

    def give(self, name: str) -> None:
        """Rename ``name`` first, so that nothing the test left reaches it any more, then
        empty it and keep it for the next test; or drop it, if the test changed its shape
        or emptying it failed."""
        renamed = f"cronchain_test_{uuid.uuid4().hex[:12]}"
        try:
            with self.admin.connect() as conn:
                conn.execute(_OTHERS, {"name": name})
                conn.exec_driver_sql(f"ALTER DATABASE {name} RENAME TO {renamed}")
        except sqlalchemy.exc.SQLAlchemyError:
            services.drop_database(self.admin, name)
            return
        engine = _engine(renamed)
        try:
            kept = self._emptied(engine)
        except sqlalchemy.exc.SQLAlchemyError:
            kept = False
        finally:
            engine.dispose()
        if kept:
            self.free.append(renamed)
        else:
            services.drop_database(self.admin, renamed)

    def close(self) -> None:
        while self.free:
            services.drop_database(self.admin, self.free.pop())

    def _emptied(self, engine: sqlalchemy.Engine) -> bool:
        """Empty the database as its clone was; False if its shape changed."""
        with engine.connect() as conn:
            if shape(conn) != self.shape:
                return False
            tables = conn.execute(_TABLES).scalars().all()
            conn.exec_driver_sql(f"TRUNCATE {', '.join(tables)} CASCADE")
            for sequence in conn.execute(_SEQUENCES).scalars():
                conn.exec_driver_sql(f"ALTER SEQUENCE {sequence} RESTART")
            conn.exec_driver_sql(
                "DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class"
                " WHERE relnamespace = 'public'::regnamespace)"
            )
            conn.commit()
            for table in self.analyzed:  # empty: restores its size, writes no statistics
                conn.exec_driver_sql(f"ANALYZE {table}")
            conn.exec_driver_sql("SELECT pg_stat_reset()")
            conn.commit()
            return conn.execute(_SIZES).scalar_one() == self.sizes


def _engine(name: str) -> sqlalchemy.Engine:
    return sqlalchemy.create_engine(services.database_url(name), poolclass=sqlalchemy.NullPool)
