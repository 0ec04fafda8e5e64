from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from cronchain.migrations import upgrade
from cronchain.scheduler.engine import Engine
from cronchain.scheduler.invokers import default_invokers
from cronchain.scheduler.storage.db import make_engine
from tests.faults.rig import SUMMARY
from tests.support import services
from tests.support.databases import DatabasePool
from tests.support.engine import GRACE, Clock, RecordingPort


@pytest.fixture(scope="session")
def pg_admin() -> sqlalchemy.Engine:
    return services.pg_admin()


@pytest.fixture(scope="session")
def pg_template(pg_admin: sqlalchemy.Engine) -> Iterator[str]:
    """A migrated database that each test clones (cheaper than migrating each time)."""
    name = services.create_database(pg_admin)
    engine = make_engine(services.database_url(name))
    upgrade(engine)
    engine.dispose()
    yield name
    services.drop_database(pg_admin, name)


@pytest.fixture(scope="session")
def pg_pool(pg_admin: sqlalchemy.Engine, pg_template: str) -> Iterator[DatabasePool]:
    pool = DatabasePool(pg_admin, pg_template)
    yield pool
    pool.close()


@pytest.fixture
def pg_url(pg_pool: DatabasePool) -> Iterator[str]:
    """A migrated database of this test's own, as the template is."""
    name = pg_pool.take()
    yield services.database_url(name)
    pg_pool.give(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sqlalchemy.Engine]:
    """A migrated, empty database: SQLite (the embedded default) and PostgreSQL."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path}/cronchain.db")
        upgrade(engine)
    else:
        engine = make_engine(request.getfixturevalue("pg_url"))
    yield engine
    engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def port() -> RecordingPort:
    return RecordingPort()


@pytest.fixture
def engine(db: sqlalchemy.Engine, port: RecordingPort, clock: Clock) -> Engine:
    return Engine(db, port, default_invokers(), grace=GRACE, clock=clock)


# ``make test`` runs pytest-xdist's ``--dist loadgroup``: tests go to whichever worker is
# free, one by one, so that the end-to-end tests' waits and the in-process tests' CPU
# overlap. A module whose tests share a module-scoped fixture (a cluster of real
# processes, a database built once) is one group, run whole by one worker: spread, each
# worker would build that fixture again. This runs before xdist's own hook, which reads
# the groups.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand this worker's fault ledger lines to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fault_ledger"] = list(SUMMARY)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """In xdist's controller: gather the ledger lines each worker handed over."""
    SUMMARY.extend(getattr(node, "workeroutput", {}).get("fault_ledger", []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's ledger: one line per fault, at the end of the run."""
    if SUMMARY:
        terminalreporter.section("fault suite ledger")
        for line in sorted(SUMMARY):
            terminalreporter.write_line(line)
