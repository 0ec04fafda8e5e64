"""The reference pages, kept to the code: what can be written from the code is written at
build time, and what is written by hand is checked against the code, so that a job
field, setting, command, metric or endpoint the code gains fails the strict build
(``make docs``) until the reference has its entry.

Written from the code, by directives:

- ``{cronchain-command} NAME``: a command's usage and options, from the parser;
- ``{cronchain-metrics}``: every metric family with its type, labels and help, from the
  collector's families;
- ``{cronchain-model} NAME``: a spec model's fields and their defaults, from pydantic;
- ``{cronchain-reasons}``: every reason a run may have, the statuses it comes with and
  what it means, from the vocabulary every writer of a reason uses
  (``cronchain.statemachine.reasons``).

Checked against the code (a missing entry is a warning, an error under ``-W``):

- ``reference/jobs.md``: its first table names every field the spec accepts, and each
  kind's row every option of that kind;
- ``reference/settings.md``: its first table names every ``CRONCHAIN_*`` variable that
  the package reads, with the default the code takes;
- ``reference/cli.md``: every command has its ``{cronchain-command}``;
- ``reference/metrics.md``: its notes name only metrics that exist;
- ``reference/http.md``: its first table names every path the web app serves, and its
  health table every check;
- ``reference/statuses.md``: its tables name every job state and run status (its
  reasons are written, above);
- ``reference/python.md``: it describes every name ``cronchain.scheduler`` exports.

The README's tests did the same for the README until the manual moved here; the probes
(``accepted_job_fields``...) are those tests', which ``tests/unit/test_docs_site.py``
keeps testing.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from docutils import nodes
from pydantic import BaseModel
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec import controls
from cronchain.scheduler.spec import model as specmodel
from cronchain.scheduler.spec.jobspec import KINDS, JobSpec

logger = logging.getLogger(__name__)

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
SPEC_SOURCES = tuple(
    ROOT / "scheduler" / "spec" / f for f in ("jobspec.py", "model.py", "controls.py")
)
# Where the package reads its variables: settings.py reads most, spec/channels.py the
# alert channels' (every module is scanned, so a variable read anywhere counts).
PACKAGE = (ROOT / "scheduler", ROOT / "tasks", ROOT / "celeryconfig.py")
# Set by ``cronchain up`` for the processes it starts, never by a user.
INTERNAL = {"CRONCHAIN_STARTED_BY_UP"}

_KEY = re.compile(r"[a-z][a-z0-9_]*")
_VARIABLE = re.compile(r"CRONCHAIN_[A-Z0-9_]+")
_UNLIKELY = "no_such_field_at_all"


# --- what the code accepts -------------------------------------------------------------


def _string_constants(paths: Iterable[Path]) -> set[str]:
    """Every string literal in these modules: a superset of the names they accept."""
    found: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return found


def _candidates() -> set[str]:
    """Names a job field could have: the spec modules' literals and declared keys."""
    names = _string_constants(SPEC_SOURCES) | set(controls.KEYS) | set(KINDS)
    names |= {f.name for f in dataclasses.fields(JobSpec)}
    for model in vars(specmodel).values():  # the pydantic models' own field names
        if isinstance(model, type) and issubclass(model, BaseModel):
            names |= set(model.model_fields)
    return {n for n in names if _KEY.fullmatch(n)}


def _accepts(entry: Mapping[str, Any], field: str) -> bool:
    """Whether the validator knows ``field``: any outcome but "unknown field" for it,
    since ``None`` as the value may well be refused for other reasons."""
    try:
        JobSpec.from_dict("probe", entry)
    except SpecError as err:
        return not (err.field == field and err.reason == "unknown field")
    except Exception:
        return True
    return True


def accepted_job_fields() -> set[str]:
    """The top-level keys of a job entry that ``JobSpec.from_dict`` accepts, probed: each
    candidate is added to a valid entry, and the one answer that means "not a field" is
    an unknown-field error naming it (the allowed set is kept inline in jobspec.py)."""
    base = {"name": "probe", "schedule": "every 1m", "noop": {}}
    JobSpec.from_dict("probe", base)  # the probe is meaningful only if its base is valid
    assert not _accepts({**base, _UNLIKELY: None}, _UNLIKELY), "the probe accepts anything"
    return {key for key in _candidates() if _accepts({**base, key: None}, key)}


def accepted_options(kind: str) -> set[str]:
    """The option keys of one kind (``http: {url, method, ...}``), probed alike."""
    entry = {"name": "probe", "schedule": "every 1m"}
    field = f"{kind}.{_UNLIKELY}"
    assert not _accepts({**entry, kind: {_UNLIKELY: None}}, field), f"{kind}: probe is blind"
    return {key for key in _candidates() if _accepts({**entry, kind: {key: None}}, f"{kind}.{key}")}


def settings_variables() -> set[str]:
    """The ``CRONCHAIN_*`` names the package reads (its string literals), but the ones
    ``cronchain up`` passes to its own processes."""
    paths = [f for p in PACKAGE for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    return {c for c in _string_constants(paths) if _VARIABLE.fullmatch(c)} - INTERNAL


def commands(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(name, parser)`` of every command that does something (``pool set``, not
    ``pool``), in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix}{name}"
                nested = any(isinstance(a, argparse._SubParsersAction) for a in sub._actions)
                if nested:
                    yield from commands(sub, f"{full} ")
                else:
                    yield full, sub


def cli_parser() -> argparse.ArgumentParser:
    from cronchain.scheduler.cli.main import _parser

    return _parser()


def metric_families() -> list[Any]:
    """Every family ``/metrics`` writes, as the collector builds them for one job (the
    per-job families have no series without one): name, type, documentation, labels."""
    from cronchain.scheduler.storage import observed
    from cronchain.scheduler.web import metrics

    now = datetime(2026, 1, 1, tzinfo=UTC)
    job = ("docs", "probe", "SCHEDULED", 1.0, 1.0, 1.0, 1, 1, 1.0)  # times as Unix seconds
    seen = metrics.Observed(
        jobs=[job],  # type: ignore[list-item]
        states={},
        passes=observed.WatchdogPasses(passed_at=now, repairs={"ticks": 0}),
        overdue=observed.Overdue(count=0, oldest=None),
        waiting={},
        slots={},
        lags=observed.FireLags(buckets=[("+Inf", 0)], seconds=0.0),
        now=now,
    )
    return [*metrics._job_metrics(seen.jobs), *metrics._overall_metrics(seen)]


def metric_name(family: Any) -> str:
    """The name a user queries: a counter's family is written with ``_total``."""
    return f"{family.name}_total" if family.type == "counter" else family.name


def metric_labels(family: Any) -> list[str]:
    labels: dict[str, None] = {}
    for sample in family.samples:
        for label in sample.labels:
            if label not in ("le", "quantile"):
                labels[label] = None
    return list(labels)


def web_paths() -> set[str]:
    """Every path the web app serves (Flask's rules, ``<project>`` as written there)."""
    from celery import Celery
    from sqlalchemy import create_engine

    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.settings import Settings
    from cronchain.scheduler.web.app import create_app

    db = create_engine("sqlite://")
    settings = Settings(
        database_url="sqlite://", broker_url="memory://", home=ROOT, watchdog_interval=30
    )
    app = create_app(db, Celery(set_as_current=False), settings, Scheduler(db))
    return {rule.rule for rule in app.url_map.iter_rules() if rule.endpoint != "static"}


def health_checks() -> set[str]:
    from cronchain.scheduler.web import CHECKS

    return set(CHECKS)


# --- the parts written from the code ----------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def command_text(name: str) -> str:
    """A command's usage and a table of its arguments, from the parser."""
    parser = dict(commands(cli_parser()))[name]
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        flags = ", ".join(f"`{o}`" for o in action.option_strings)
        named = flags or f"`{action.metavar or action.dest}`"
        rows.append(f"| {named} | {_cell(action.help or '')} |")
    table = ["| argument | meaning |", "| --- | --- |", *rows] if rows else []
    return "\n".join(["```text", usage, "```", "", *table, ""])


def metrics_text() -> str:
    """A table of every metric: its name, type, labels and help, from the families."""
    rows = [
        f"| `{metric_name(f)}` | {f.type} | {', '.join(f'`{x}`' for x in metric_labels(f))}"
        f" | {_cell(f.documentation)} |"
        for f in metric_families()
    ]
    return "\n".join(["| metric | type | labels | help |", "| --- | --- | --- | --- |", *rows, ""])


class CommandDirective(SphinxDirective):
    """``{cronchain-command} pool set``: that command's usage and arguments."""

    required_arguments = 1
    final_argument_whitespace = True

    def run(self) -> list[nodes.Node]:
        return self.parse_text_to_nodes(command_text(self.arguments[0]))


def model_text(name: str) -> str:
    """A table of one spec model's fields: whether required, and the default, from the
    pydantic model itself (durations are seconds)."""
    model = getattr(specmodel, name)
    rows = []
    for field, info in model.model_fields.items():
        if info.is_required():
            default = "required"
        elif info.default is None:
            default = "none"
        else:
            default = f"`{json.dumps(info.default)}`"
        rows.append(f"| `{field}` | {default} |")
    return "\n".join(["| field | default |", "| --- | --- |", *rows, ""])


class ModelDirective(SphinxDirective):
    """``{cronchain-model} HttpOptions``: that model's fields and their defaults."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        return self.parse_text_to_nodes(model_text(self.arguments[0]))


def reasons_text() -> str:
    """A table of every reason: on which statuses, and what it means."""
    from cronchain.statemachine.reasons import MEANINGS

    rows = [
        f"| `{reason}` | {', '.join(f'`{s}`' for s in m.on)} | {_cell(m.means)} |"
        for reason, m in MEANINGS.items()
    ]
    return "\n".join(["| reason | on | means |", "| --- | --- | --- |", *rows, ""])


class ReasonsDirective(SphinxDirective):
    """``{cronchain-reasons}``: the table of every reason."""

    def run(self) -> list[nodes.Node]:
        return self.parse_text_to_nodes(reasons_text())


class MetricsDirective(SphinxDirective):
    """``{cronchain-metrics}``: the table of every metric family."""

    def run(self) -> list[nodes.Node]:
        return self.parse_text_to_nodes(metrics_text())


# --- the pages, checked --------------------------------------------------------------------

_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)


def first_table(text: str) -> list[tuple[str, str]]:
    """(first cell, rest of the row) of each body row of the first table in ``text``."""
    match = re.search(r"^\|.*\n\| ?---.*\n((?:\|.*\n?)*)", _FENCE.sub("", text), re.M)
    if not match:
        return []
    rows = []
    for line in match.group(1).splitlines():
        first, _, rest = line.removeprefix("|").strip().partition(" | ")
        rows.append((first, rest))
    return rows


def section(text: str, title: str) -> str:
    """The body of the heading ``title`` (any level), up to the next heading."""
    match = re.search(rf"^#+ {re.escape(title)}\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    return match.group(1) if match else ""


def code_names(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def missing_job_fields(page: str) -> dict[str, set[str]]:
    """Accepted keys that the fields table does not document: top-level keys must name a
    row, a kind's options must appear in that kind's row."""
    rows = first_table(page)
    documented = set().union(set(), *(code_names(first) for first, _ in rows))
    missing = {"job": accepted_job_fields() - documented}
    for kind in KINDS:
        row = next((rest for first, rest in rows if first == f"`{kind}`"), "")
        missing[kind] = accepted_options(kind) - code_names(row)
    return {where: keys for where, keys in missing.items() if keys}


def _read_settings(env: dict[str, str]) -> tuple[Any, ...]:
    """Everything the settings read from ``env``: the settings, the retention, the
    alert delivery."""
    from cronchain.scheduler.settings import AlertDelivery, Settings, history_retention

    return Settings.from_env(env), history_retention(env), AlertDelivery.from_env(env)


def wrong_defaults(page: str) -> set[str]:
    """The variables whose documented default (a single code value in the default
    column, ``$CRONCHAIN_HOME`` standing for the default home) is not what the code
    takes when the variable is unset: set to it, the settings must read as unset (a
    value the code refuses is wrong too). A cell of two values or of words is not
    checked (``CRONCHAIN_BROKER_URL``'s, ``CRONCHAIN_HEALTH_OVERDUE``'s)."""
    unset = _read_settings({})
    home = str(unset[0].home)
    wrong = set()
    for first, rest in first_table(page):
        default = rest.partition(" | ")[0]
        values = code_names(default)
        if len(values) != 1 or not default.startswith("`"):
            continue  # (none), or words: "two watchdog intervals"
        variable = first.strip("`")
        value = values.pop().replace("$CRONCHAIN_HOME", home)
        try:
            if _read_settings({variable: value}) != unset:
                wrong.add(variable)
        except SpecError:  # ConfigError: refused
            wrong.add(variable)
    return wrong


def undocumented_variables(page: str) -> set[str]:
    listed = set().union(set(), *(code_names(first) for first, _ in first_table(page)))
    return settings_variables() - listed


def unlisted_commands(page: str) -> set[str]:
    """Commands without their section: each has a ``{cronchain-command} NAME``."""
    shown = set(re.findall(r"^```\{cronchain-command\}\s+(.+?)\s*$", page, re.M))
    return {name for name, _ in commands(cli_parser())} - shown


def stale_metric_notes(page: str) -> set[str]:
    noted = {m.group(1) for m in re.finditer(r"^`(cronchain_[a-z_]+)`\s*$", page, re.M)}
    return noted - {metric_name(f) for f in metric_families()}


def exit_statuses() -> set[str]:
    """The statuses the command's help names (``Exit status: 0 done; 1 ...``) and the one
    it leaves when its reader closes the pipe."""
    from cronchain.scheduler.cli.main import CLOSED_PIPE, DESCRIPTION

    said = DESCRIPTION.split("Exit status:", 1)[1]
    return set(re.findall(r"(?:^|;)\s*(\d+) ", said)) | {str(CLOSED_PIPE)}


def unlisted_exit_statuses(page: str) -> set[str]:
    listed = {first.strip("` ") for first, _ in first_table(section(page, "Exit statuses"))}
    return exit_statuses() - listed


def web_statuses() -> set[str]:
    """The statuses besides 200 that the web package answers with: the literals it hands
    to ``abort``, ``redirect`` or ``Response``, or returns beside a body."""
    found = set()
    for path in sorted((ROOT / "scheduler" / "web").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in _ANSWERS:
                parts: list[ast.expr] = node.args
            elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple):
                parts = node.value.elts
            else:
                continue
            found |= {
                str(c.value)
                for part in parts
                for c in ast.walk(part)
                if isinstance(c, ast.Constant) and type(c.value) is int and 300 <= c.value < 600
            }
    return found


_ANSWERS = {"abort", "redirect", "Response"}


def unlisted_statuses(page: str) -> set[str]:
    listed = {first.strip("` ") for first, _ in first_table(section(page, "Statuses"))}
    return web_statuses() - listed


def unlisted_paths(page: str) -> set[str]:
    listed = set().union(set(), *(code_names(first) for first, _ in first_table(page)))
    return web_paths() - {name.split()[-1] for name in listed}


def unlisted_checks(page: str) -> set[str]:
    rows = first_table(section(page, "Health checks"))
    return health_checks() - {name for first, _ in rows for name in code_names(first)}


def unlisted_states(page: str) -> set[str]:
    from cronchain.scheduler.storage.models import INVOCATION_STATUSES, JOB_STATES

    def named(title: str) -> set[str]:
        return {n for first, _ in first_table(section(page, title)) for n in code_names(first)}

    missing = set(JOB_STATES) - named("Job states")
    return missing | (set(INVOCATION_STATUSES) - named("Run statuses"))


def undescribed_names(page: str) -> set[str]:
    import cronchain.scheduler

    directive = r"^\.\. auto(?:class|function|exception):: cronchain\.scheduler\.(\w+)"
    found = re.findall(directive, page, re.M)
    return set(cronchain.scheduler.__all__) - set(found)


CHECKS = {
    "reference/jobs": lambda page: missing_job_fields(page),
    "reference/settings": lambda page: undocumented_variables(page) | wrong_defaults(page),
    "reference/cli": lambda page: unlisted_commands(page) | unlisted_exit_statuses(page),
    "reference/metrics": lambda page: stale_metric_notes(page),
    "reference/http": lambda page: (
        unlisted_paths(page) | unlisted_checks(page) | unlisted_statuses(page)
    ),
    "reference/statuses": unlisted_states,
    "reference/python": undescribed_names,
}


def check_pages(app: Sphinx, docname: str, source: list[str]) -> None:
    """On reading a checked page: warn for each name the code has and the page lacks."""
    check = CHECKS.get(docname)
    if check is None:
        return
    missing = check(source[0])
    if missing:
        logger.warning("the reference lacks entries the code has: %s", missing, location=docname)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("cronchain-command", CommandDirective)
    app.add_directive("cronchain-metrics", MetricsDirective)
    app.add_directive("cronchain-model", ModelDirective)
    app.add_directive("cronchain-reasons", ReasonsDirective)
    app.connect("source-read", check_pages)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
