"""The ``cronchain`` command line.

Exit status: 0 done; 1 the database or the broker cannot be reached, or the database is
not migrated; 2 bad input (a file, a job, an argument or a ``CRONCHAIN_*`` variable);
141 the reader of its output went away (``| head``), as Unix tools do. Each failure
cronchain expects is one line on stderr, never a traceback, with a suggestion for a
misspelt command, option, job or zone.

argparse, kept rather than click or typer: every option is plain, the standard library
has all it needs (a suggestion for a misspelt choice is a dozen lines here), and the
tests and ``cronchain up``'s children call ``main`` as it is.
"""

from __future__ import annotations

import argparse
import csv
import difflib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronchain.scheduler import progress
from cronchain.scheduler.api import (
    EARLIEST,
    LATEST,
    MAX_BACKFILL_CONCURRENCY,
    MAX_HISTORY,
    MAX_ID,
    iso,
)
from cronchain.scheduler.cli.text import forecast_text, invocation_text, show, table
from cronchain.scheduler.declare.apply import collector_paused
from cronchain.scheduler.declare.beatimport.command import add_arguments as import_beat_arguments
from cronchain.scheduler.errors import NotFound, SpecError, TransientError
from cronchain.scheduler.outside import shown_on_a_terminal
from cronchain.scheduler.queries.forecast import MAX_WINDOW, THRESHOLD, WINDOW
from cronchain.scheduler.storage.alert_store import delivery_text
from cronchain.scheduler.timing.localtime import transitions
from cronchain.scheduler.timing.schedules import DAYS, parse_duration, parse_schedule, parse_zone
from cronchain.scheduler.version import VERSION
from cronchain.scheduler.web import CHECKS
from cronchain.statemachine import InvalidTransition, Reason

if TYPE_CHECKING:
    from cronchain.scheduler.api import Scheduler

Handler = Callable[[argparse.Namespace], int]
MAX_NEXT = 1000  # fire times `next` lists at most
MAX_PROCESSES = 1000  # `up --concurrency`
MAX_THREADS = 10_000  # `up --work-concurrency`, as CRONCHAIN_WORK_CONCURRENCY


DESCRIPTION = """cronchain: a durable cron and job scheduler for Celery.

Exit status: 0 done; 1 the database or the broker cannot be reached, or the database
is not migrated; 2 bad input (a file, a job, an argument or a CRONCHAIN_* variable)."""
CLOSED_PIPE = 141  # 128 + SIGPIPE: what `yes | head` leaves


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command and return its exit status (see the module's docstring)."""
    try:
        return _main(argv)
    except BrokenPipeError:  # `cronchain jobs --json | head`: the reader has what it wants
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the flush at exit fails no more
        return CLOSED_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    logs = _LogLines()
    logger = logging.getLogger("cronchain")
    logger.addHandler(logs)
    try:
        code = args.handler(args)
    except (SpecError, NotFound, InvalidTransition) as err:
        return _fail(2, str(err))
    except TransientError as err:
        return _fail(1, str(err))
    finally:
        logger.removeHandler(logs)
    unsent = args.runtime.unsent if getattr(args, "runtime", None) else None
    if unsent is not None:
        return _fail(
            1,
            f"the change is saved, but {unsent}; the watchdog will send its messages once"
            " the broker is back",
        )
    return code


def _fail(code: int, message: str) -> int:
    print(f"cronchain: {message}", file=sys.stderr)
    return code


class _LogLines(logging.Handler):
    """cronchain's warnings during a command, one line each on stderr. A message the
    broker did not take is left out (``main`` says so once, at the end); an unexpected
    error keeps its traceback, since it is a bug."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("cronchain: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and isinstance(record.exc_info[1], TransientError):
            return
        print(self.format(record), file=sys.stderr)


def _scheduler(args: argparse.Namespace) -> Scheduler:
    """The command's scheduler. Its runtime stays on ``args``, for ``main`` to tell
    whether a message did not reach the broker."""
    from cronchain.scheduler.api import Scheduler
    from cronchain.scheduler.workers.runtime import Runtime

    args.runtime = Runtime.for_command()
    return Scheduler(args.runtime.engine)


def _time(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: add Z or an offset")
    try:
        in_range = EARLIEST <= value < LATEST
    except OverflowError:  # an offset that moves it past year 9999
        in_range = False
    if not in_range:
        raise argparse.ArgumentTypeError(
            f"{text!r} is out of range: give a time from {EARLIEST:%Y-%m-%d} to {LATEST:%Y-%m-%d}"
        )
    return value.astimezone(UTC)


def _window(text: str) -> timedelta:
    """A forecast's window: a duration from 1s to 7d."""
    try:
        value = parse_duration(text, "window")
    except SpecError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not timedelta(seconds=1) <= value <= MAX_WINDOW:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration from 1s to 7d")
    return value


def _count(high: int, what: str = "whole number") -> Callable[[str], int]:
    """An argument type: a whole number from 1 to ``high``."""

    def count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} from 1 to {high}")
        return value

    return count


_invocation_id = _count(MAX_ID, "invocation id")


# --- commands --------------------------------------------------------------------------


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    scheduler = _scheduler(args)
    scheduler.upgrade()
    revision = scheduler.revision()
    if args.json:
        _print_json({"revision": revision})
    else:
        print(f"database is at the newest revision ({revision})")
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    """A file's project, or each project an app's ``@periodic`` tasks declare (its lines
    prefixed with the project when there are several)."""
    if (args.file is None) == (args.app is None):
        raise SpecError("apply", "give a FILE or --app MODULE:APP (one of them)")
    if args.project is not None and args.app is None:
        raise SpecError("--project", "goes with --app: a file names its own project")
    options = {"dry_run": args.dry_run, "prune": args.prune}
    # A progress bar on a terminal, for 1,000 jobs or more; no cycle collector (see
    # collector_paused) while 100,000 specs are read and applied.
    with progress.drawing(sys.stderr), collector_paused():
        if args.app is None:
            report = _scheduler(args).apply(args.file, **options)
            reports = {report.project: report}
        else:
            reports = _scheduler(args).apply_app(args.app, project=args.project, **options)
    kinds = [w for w in APPLIED if w != "deleted" or args.prune]
    if args.json:
        found = {project: {w: getattr(r, w) for w in kinds} for project, r in reports.items()}
        _print_json({"dry_run": args.dry_run, "projects": found})
        return 0
    prefix = "would be " if args.dry_run else ""
    for project, report in reports.items():
        label = f"{project}: " if args.app is not None and len(reports) > 1 else ""
        for what in kinds:
            names = getattr(report, what)
            print(f"{label}{prefix}{what}: {len(names)}")
            if args.verbose:  # a name a line: a file may hold 100,000 jobs
                print("".join(f"  {name}\n" for name in names), end="")
    return 0


APPLIED = ("created", "updated", "disabled", "deleted", "unchanged")


def cmd_jobs(args: argparse.Namespace) -> int:
    columns = ["id", "state", "schedule", "timezone", "next_tick", "paused", "revision"]

    def text(rows: list[dict[str, Any]]) -> str:
        for row in rows:  # a schedule's days are part of what it means
            if row["days"] == "both":
                row["schedule"] = f"{row['schedule']} (days: both)"
        return table(rows, columns)

    show(_scheduler(args).jobs(), args.json, text)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    if args.invocation is not None:
        detail = _scheduler(args).invocation(args.invocation)
        if args.job and args.job not in (detail["job"], detail["job"].rpartition("/")[2]):
            raise NotFound(f"invocation {args.invocation} is not one of {args.job}'s")
        show(detail, args.json, invocation_text)
        return 0
    rows = _scheduler(args).history(
        args.job, since=args.since, before=args.before, limit=args.limit
    )
    columns = [
        *("id", "job", "slot", "status", "reason", "attempt", "started_at", "finished_at"),
        "error",
    ]
    if args.csv:
        out = csv.writer(sys.stdout, lineterminator="\n")
        out.writerow(HISTORY_CSV)
        out.writerows([row[c] for c in HISTORY_CSV] for row in map(_with_wait, rows))
    else:
        show(rows, args.json, lambda rows: table([_with_wait(r) for r in rows], columns))
    if len(rows) == args.limit and not (args.json or args.csv) and sys.stderr.isatty():
        print(f"cronchain: more: --before {rows[-1]['id']}", file=sys.stderr)
    return 0


# What ``history --csv`` writes: the summary's fields but ``checks`` (JSON, in --json).
HISTORY_CSV = (
    *("id", "job", "slot", "status", "reason", "attempt", "started_at", "finished_at"),
    *("error", "trigger_id", "revision"),
)


def _with_wait(row: dict[str, Any]) -> dict[str, Any]:
    """A run that waited for its upstreams or gates and then started says so in
    ``reason``."""
    checks = row["checks"] or {}
    waits = [
        f"{what} (waited until {released})"
        for what, released in (
            (Reason.UPSTREAM, checks.get("released_at")),
            (Reason.GATE, checks.get(Reason.GATE, {}).get("released_at")),
        )
        if released
    ]
    if row["reason"] or not waits:
        return row
    return row | {"reason": ", ".join(waits)}


def cmd_alerts(args: argparse.Namespace) -> int:
    rows = _scheduler(args).alerts(args.job, limit=args.limit)
    columns = ["id", "job", "slot", "event", "state", "attempts", "to", "raised_at"]

    def text(rows: list[dict[str, Any]]) -> str:
        went = [
            row | {"to": delivery_text(row["channels"], row["delivered"], row["state"])}
            for row in rows
        ]
        return table(went, columns)

    show(rows, args.json, text)
    return 0


def cmd_abort(args: argparse.Namespace) -> int:
    if (args.job is None) == (args.invocation is None):
        raise SpecError("abort", "name a JOB or give --invocation ID (one of them)")
    aborted = _scheduler(args).abort(args.job, invocation=args.invocation)
    if args.json:
        _print_json({"job": args.job, "invocation": args.invocation, "aborted": aborted})
        return 0
    what = args.job or f"invocation {args.invocation}"
    counts = [
        f"{len(ids)} {status.lower()} ({_ids(ids)})" for status, ids in aborted.items() if ids
    ]
    if not counts:
        print(f"{what}: nothing active or waiting")
    else:  # "aborted 1 running (4) and 2 waiting (5, 6)"
        listed = ", ".join(counts[:-1]) + " and " if len(counts) > 1 else ""
        print(f"{what}: aborted {listed}{counts[-1]}")
    return 0


def _ids(ids: list[int], most: int = 10) -> str:
    """A few ids, then how many more: an abort may end thousands (the API returns all)."""
    shown = ", ".join(map(str, ids[:most]))
    return shown + (f", ... {len(ids) - most} more" if len(ids) > most else "")


_WAITS_FOR = {
    Reason.UPSTREAM: "its upstreams",
    Reason.GATE: "its gates",
    Reason.POOL: "a place in its pool",
}


def cmd_trigger(args: argparse.Namespace) -> int:
    r = _scheduler(args).trigger(args.job)
    if args.json:
        _print_json({"job": args.job, **r})
        return 0
    match r["result"]:
        case "started":
            print(f"{args.job}: invocation {r['invocation']} started")
        case "buffered":
            print(
                f"{args.job}: invocation {r['invocation']} is WAITING: another run is active;"
                " it starts in its turn"
            )
        case "waiting":
            what = _WAITS_FOR.get(r["waiting"], r["waiting"])
            print(
                f"{args.job}: invocation {r['invocation']} is WAITING for {what};"
                f" cronchain history --invocation {r['invocation']} says which"
            )
        case _:
            why = ": another run is active" if r["skipped"] == Reason.OVERLAP else ""
            print(
                f"{args.job}: skipped ({r['skipped']}){why}; recorded as invocation"
                f" {r['invocation']}"
            )
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    _scheduler(args).pause(args.job, args.reason)
    if args.json:
        _print_json({"job": args.job, "paused": True, "reason": args.reason})
    else:
        print(f"{args.job}: paused")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    _scheduler(args).resume(args.job, catch_up=args.catch_up)
    if args.json:
        _print_json({"job": args.job, "paused": False, "catch_up": args.catch_up})
    else:
        print(f"{args.job}: resumed" + (", catching up" if args.catch_up else ""))
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    result = _scheduler(args).explain(args.job, args.at)
    show(result, args.json, lambda r: shown_on_a_terminal(f"{r['job']} at {r['at']}: {r['text']}"))
    return 0


def cmd_forecast(args: argparse.Namespace) -> int:
    result = _scheduler(args).forecast(args.window, args.threshold, start=args.start)
    show(result.as_json(), args.json, lambda _: forecast_text(result))
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    with progress.drawing(sys.stderr):  # a progress bar on a terminal, for 1,000 slots or more
        result = _scheduler(args).backfill(
            args.job,
            args.start,
            args.end,
            max_concurrent=args.max_concurrent,
            dry_run=args.dry_run,
        )

    def text(r: dict[str, Any]) -> str:
        verb = "would create" if r["dry_run"] else "created"
        lines = [f"{r['job']}: {verb} {len(r['slots'])} invocations"]
        lines += [f"  {slot}" for slot in r["slots"]]
        if r["existing"]:
            lines.append(f"{len(r['existing'])} slots have an invocation already (left alone)")
        return "\n".join(lines)

    show(result, args.json, text)
    return 0


def cmd_next(args: argparse.Namespace) -> int:
    """Each fire time in UTC and local time; a DST transition crossed on the way is shown
    before the first fire time after it (``transitions`` in the JSON rows)."""
    schedule = parse_schedule(args.schedule, args.tz, days=args.days)
    zone = parse_zone(args.tz)
    t = args.after or datetime.now(UTC)
    rows = []
    for _ in range(args.count):
        nxt = schedule.next_after(t)
        if nxt is None:
            raise SpecError("schedule", f"{args.schedule!r} has no fire times of its own")
        crossed = [
            {"at": iso(c.at), "from": _offset(c.before), "to": _offset(c.after)}
            for c in transitions(t, nxt, zone)
        ]
        rows.append(
            {"utc": iso(nxt), "local": nxt.astimezone(zone).isoformat(), "transitions": crossed}
        )
        t = nxt

    def text(rows: list[dict[str, Any]]) -> str:
        lines = []
        for r in rows:
            for c in r["transitions"]:
                lines.append(f"-- DST: clocks move from {c['from']} to {c['to']} at {c['at']}")
            lines.append(f"{r['utc']}  {r['local']}")
        return "\n".join(lines)

    show(rows, args.json, text)
    return 0


def _offset(delta: timedelta) -> str:
    sign = "-" if delta < timedelta(0) else "+"
    minutes = abs(int(delta.total_seconds())) // 60
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def cmd_import_beat(args: argparse.Namespace) -> int:
    from cronchain.scheduler.declare.beatimport.command import cmd_import_beat

    return cmd_import_beat(args)


def cmd_pool_set(args: argparse.Namespace) -> int:
    _scheduler(args).set_pool(args.name, args.size)
    if args.json:
        _print_json({"pool": args.name, "size": args.size})
    else:
        print(f"pool {args.name}: {args.size} places")
    return 0


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def cmd_pool_list(args: argparse.Namespace) -> int:
    rows = _scheduler(args).pools()
    show(rows, args.json, lambda rows: table(rows, ["name", "size", "taken", "waiting"]))
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    """Migrate, apply the given job files, then run both paths until stopped
    (scheduler.cli.up)."""
    from cronchain.scheduler.cli.up import up

    return up(
        args.files,
        concurrency=args.concurrency,
        queues=args.queues,
        work_concurrency=args.work_concurrency,
        loglevel=args.loglevel,
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """/metrics, /healthz and the jobs page (scheduler.web)."""
    from cronchain.scheduler.web.serve import serve

    return serve(args.host, args.port, args.basic_auth)


def cmd_health(args: argparse.Namespace) -> int:
    from cronchain.scheduler.web.serve import health

    return health(args.json, args.check or ())


# --- the parser ------------------------------------------------------------------------

JSON_HELP = "print the result as JSON"
JOB_HELP = "project/name (or a name that one project has)"
TIME_HELP = "an ISO 8601 time with a zone (2026-03-01T12:00Z)"


class _Parser(argparse.ArgumentParser):
    """argparse, saying which command or option was meant when one is misspelt."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = _like(str(value), choices)
            listed = ", ".join(choices)
            message = f"invalid choice: {value!r}{hint} (choose from {listed})"
            raise argparse.ArgumentError(action, message)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        found, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = getattr(found, "command_parser", self)
            options = [o for action in parser._actions for o in action.option_strings]
            flags = [e for e in extras if e.startswith("-")]
            hint = _like(flags[0].split("=")[0], options) if flags else ""
            parser.error(f"unrecognized arguments: {' '.join(extras)}{hint}")
        return found


def _like(given: str, known: list[str]) -> str:
    close = difflib.get_close_matches(given, known, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="cronchain",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"cronchain {VERSION}")
    sub = p.add_subparsers(required=True, metavar="COMMAND", parser_class=_Parser)

    def command(
        name: str, handler: Handler, help: str, parent: Any = sub
    ) -> argparse.ArgumentParser:
        c = parent.add_parser(name, help=help, description=help)
        c.set_defaults(handler=handler, command_parser=c)
        return c

    def as_json(c: argparse.ArgumentParser) -> None:
        c.add_argument("--json", action="store_true", help=JSON_HELP)

    db = command("db", lambda a: 0, "database maintenance")
    db_sub = db.add_subparsers(required=True, metavar="ACTION", parser_class=_Parser)
    c = command("upgrade", cmd_db_upgrade, "migrate the database to the newest schema", db_sub)
    as_json(c)

    c = command(
        "apply",
        cmd_apply,
        "create, update and disable a project's jobs from a file, or from an app's @periodic tasks",
    )
    c.add_argument("file", nargs="?", help="a job file (YAML)")
    c.add_argument("--app", metavar="MODULE:APP", help="a Celery app whose tasks declare jobs")
    c.add_argument("--project", help="with --app: apply this project's jobs only")
    c.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    c.add_argument(
        "--prune",
        action="store_true",
        help="delete the project's jobs missing from the file or app (with their history)",
    )
    c.add_argument(
        "-v", "--verbose", action="store_true", help="list each job's name under its count"
    )
    as_json(c)

    c = command("jobs", cmd_jobs, "list jobs")
    as_json(c)

    c = command("history", cmd_history, "list invocations, newest first")
    c.add_argument("job", nargs="?", help=f"{JOB_HELP}; all jobs if left out")
    c.add_argument("--since", type=_time, help=f"made at or after this time: {TIME_HELP}")
    c.add_argument(
        "--before",
        type=_invocation_id,
        metavar="ID",
        help="older than invocation ID: the next page (the last id a page listed)",
    )
    c.add_argument(
        "--limit",
        type=_count(MAX_HISTORY),
        default=50,
        metavar="N",
        help=f"at most N invocations (default 50, at most {MAX_HISTORY}: page with --before)",
    )
    c.add_argument(
        "--invocation", type=_invocation_id, metavar="ID", help="one invocation, with its log"
    )
    out = c.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help=JSON_HELP)
    out.add_argument("--csv", action="store_true", help="print CSV, a header line first")

    c = command("alerts", cmd_alerts, "list alerts, newest first, with their delivery")
    c.add_argument("job", nargs="?", help=f"{JOB_HELP}; all jobs if left out")
    c.add_argument(
        "--limit",
        type=_count(MAX_HISTORY),
        default=50,
        metavar="N",
        help="at most N alerts (default 50)",
    )
    as_json(c)

    c = command(
        "abort", cmd_abort, "abort a job's active and waiting invocations, or one invocation"
    )
    c.add_argument("job", nargs="?", help=JOB_HELP)
    c.add_argument("--invocation", type=_invocation_id, metavar="ID", help="this invocation only")
    as_json(c)

    c = command("trigger", cmd_trigger, "run a job now")
    c.add_argument("job", help=JOB_HELP)
    as_json(c)

    c = command("pause", cmd_pause, "stop a job's ticks until it is resumed")
    c.add_argument("job", help=JOB_HELP)
    c.add_argument("--reason", help="why, kept with the pause (jobs and explain show it)")
    as_json(c)

    c = command("resume", cmd_resume, "tick again from the next slot after now")
    c.add_argument("job", help=JOB_HELP)
    c.add_argument(
        "--catch-up",
        action="store_true",
        help="let the job's misfire policy run the slots missed while paused",
    )
    as_json(c)

    c = command("explain", cmd_explain, "say why a job did or did not run at a time")
    c.add_argument("job", help=JOB_HELP)
    c.add_argument("--at", type=_time, required=True, help=TIME_HELP)
    as_json(c)

    c = command(
        "forecast", cmd_forecast, "count every job's slots ahead by the second, and find herds"
    )
    c.add_argument(
        "--window",
        type=_window,
        default=WINDOW,
        metavar="DURATION",
        help="how far ahead from now: 30m, 24h, 7d (default 24h, at most 7d)",
    )
    c.add_argument(
        "--threshold",
        type=_count(10**9),
        default=THRESHOLD,
        metavar="N",
        help=f"fires in one second that make a herd (default {THRESHOLD})",
    )
    c.add_argument(
        "--from",
        dest="start",
        type=_time,
        help=f"start the window here rather than now (a day to come: {TIME_HELP});"
        " a fixed-delay job counts only its pending tick, if it falls in the window",
    )
    as_json(c)

    c = command("backfill", cmd_backfill, "run a job once for each slot in a range")
    c.add_argument("job", help=JOB_HELP)
    c.add_argument(
        "--from", dest="start", type=_time, required=True, help=f"{TIME_HELP}; inclusive"
    )
    c.add_argument("--to", dest="end", type=_time, required=True, help=f"{TIME_HELP}; inclusive")
    c.add_argument(
        "--max-concurrent",
        type=_count(MAX_BACKFILL_CONCURRENCY),
        default=1,
        metavar="N",
        help="backfill runs in flight at once (default 1)",
    )
    c.add_argument("--dry-run", action="store_true", help="list the slots; create nothing")
    as_json(c)

    c = command(
        "import-beat", cmd_import_beat, "write a job file from a Celery beat schedule, to apply"
    )
    import_beat_arguments(c)

    c = command("next", cmd_next, "show the next fire times of a schedule")
    c.add_argument("schedule", help="a schedule as a job gives it (cron, every 5m, ...)")
    c.add_argument("--tz", default="UTC", help="IANA time zone (default UTC)")
    c.add_argument(
        "--days",
        choices=DAYS,
        help="a cron schedule's two day fields: either matches (cron, the default) or both"
        " must (Celery's crontab), as a job's days:",
    )
    c.add_argument("--after", type=_time, help=f"{TIME_HELP} (default now)")
    c.add_argument(
        "--count", type=_count(MAX_NEXT), default=5, metavar="N", help="how many (default 5)"
    )
    as_json(c)

    pool = command("pool", lambda a: 0, "pools: places shared by jobs (pool: in a job)")
    pool_sub = pool.add_subparsers(required=True, metavar="ACTION", parser_class=_Parser)
    c = command("set", cmd_pool_set, "make a pool, or change its size, now", pool_sub)
    c.add_argument("name", help="the pool's name")
    c.add_argument("size", type=int, help="places: runs STARTING or RUNNING at once (0-10000)")
    as_json(c)
    c = command("list", cmd_pool_list, "every pool: size, places taken, runs waiting", pool_sub)
    as_json(c)

    c = command("up", cmd_up, "migrate, apply job files, run both paths' workers and beat")
    c.add_argument("files", nargs="*", metavar="FILE", help="job files to apply first")
    c.add_argument(
        "--concurrency",
        type=_count(MAX_PROCESSES),
        default=2,
        metavar="N",
        help="processes of the control path (default 2)",
    )
    c.add_argument(
        "--queues",
        type=lambda s: s.split(","),
        default=[],
        help="more queues for the control path's worker (for celery jobs), comma-separated",
    )
    c.add_argument(
        "--work-concurrency",
        type=_count(MAX_THREADS),
        metavar="N",
        help="threads of the work path (default CRONCHAIN_WORK_CONCURRENCY, or 100)",
    )
    c.add_argument(
        "--loglevel",
        default="INFO",
        help="the workers' log level (default INFO; DEBUG adds Celery's per-task lines)",
    )

    c = command("serve", cmd_serve, "serve /metrics, /healthz and the jobs page over HTTP")
    c.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    c.add_argument(
        "--port", type=_count(65_535, "port"), default=8080, help="port to listen on (default 8080)"
    )
    c.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        help="credentials for the pages (default CRONCHAIN_WEB_BASIC_AUTH); required beyond"
        " loopback",
    )

    c = command("health", cmd_health, "check cronchain's health: exit 0 healthy, 1 not")
    as_json(c)
    c.add_argument(
        "--check",
        action="append",
        choices=CHECKS,
        help="only this check (repeat for more); all of them run, the others are not shown",
    )
    return p


if __name__ == "__main__":
    sys.exit(main())
