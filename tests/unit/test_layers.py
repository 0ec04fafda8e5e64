"""The package's shape (issue 36): what the import-linter contracts in pyproject.toml
cannot say. Every import counts, inside functions and under ``TYPE_CHECKING`` too (grimp
reads them all), since each one ties two modules as firmly when it runs."""

from __future__ import annotations

import subprocess
import sys

import grimp

PARTS = ("cronchain.scheduler", "cronchain.statemachine", "cronchain.tasks", "cronchain.migrations")


def cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The groups of more than one module that each reach all the others by imports."""
    nodes = {m for m in graph.modules if m.startswith(PARTS)}
    reach = {m: _reachable(graph, m, nodes) for m in nodes}
    found: list[set[str]] = []
    for m in sorted(nodes):
        if m in reach[m] and not any(m in part for part in found):
            found.append({n for n in reach[m] if m in reach[n]})
    return found


def _reachable(graph: grimp.ImportGraph, start: str, nodes: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.find_modules_directly_imported_by(todo.pop()) & nodes:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycle() -> None:
    graph = grimp.build_graph("cronchain")
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for a, b in ["ab", "bc", "ca", "cd"]:
        graph.add_import(importer=f"cronchain.scheduler.{a}", imported=f"cronchain.scheduler.{b}")
    assert cycles(graph) == [{f"cronchain.scheduler.{x}" for x in "abc"}]


def test_declaring_a_job_loads_neither_sqlalchemy_nor_the_engine() -> None:
    """A user's tasks module imports ``periodic`` (and may build a ``JobSpec``): that must
    not load the database layer or the engine into every worker that imports it."""
    code = (
        "import sys\n"
        "from cronchain.scheduler import JobSpec, periodic\n"
        "JobSpec('p', 'a', '0 0 13 * 5', days='both')\n"
        "engines = ('cronchain.scheduler.engine', 'cronchain.scheduler.core.engine')\n"
        "loaded = [m for m in ('sqlalchemy', *engines) if m in sys.modules]\n"
        "print(','.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_the_package_still_offers_its_names() -> None:
    import cronchain.scheduler as package

    for name in package.__all__:
        assert getattr(package, name) is not None
    assert set(package.__all__) <= set(dir(package))


def test_the_engine_is_what_its_features_take_it_for(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Plug-ins are typed against ``Host``, the core's own parts against ``CoreHost``,
    never against the engine: an engine that stopped offering what they name would
    fail them only at run time."""
    from datetime import timedelta

    from cronchain.scheduler.core.host import CoreHost, Host, RunEnds, RunStarts
    from cronchain.scheduler.engine import Engine
    from cronchain.scheduler.storage.db import make_engine
    from tests.support.engine import RecordingPort

    db = make_engine(f"sqlite:///{tmp_path}/h.db")
    engine = Engine(db, RecordingPort(), {}, grace=timedelta(seconds=1))
    assert isinstance(engine, Host) and isinstance(engine.runs, RunEnds)
    assert isinstance(engine.attempts, RunStarts)
    assert isinstance(engine, CoreHost)
