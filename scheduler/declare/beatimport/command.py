"""``cronchain import-beat``: a job file from a Celery app's beat schedule or from
django-celery-beat's tables, to review and apply.

Nothing is approximated: an entry without a faithful equivalent is named on stderr with
the reason, and then no file is written (exit 2) unless ``--skip-unsupported`` says to
write the others. What beat itself will never run again (a disabled one-off task) is
named too, as a note."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cronchain.scheduler.declare.beatimport.entries import Converted, Imported
from cronchain.scheduler.declare.beatimport.jobfile import job_file_text
from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec.model import NAME

DJANGO_PROJECT = "beat"


def add_arguments(c: argparse.ArgumentParser) -> None:
    source = c.add_mutually_exclusive_group(required=True)
    source.add_argument("app", nargs="?", metavar="APP", help="MODULE:ATTRIBUTE, as celery -A")
    source.add_argument(
        "--django-celery-beat",
        dest="django_url",
        metavar="DATABASE_URL",
        help="read django-celery-beat's tables (postgresql://... or sqlite:///...)",
    )
    c.add_argument(
        "--project", help="the jobs' project (default: the app's name with -beat, or 'beat')"
    )
    c.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    c.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="write the entries that convert, though others were left out",
    )


def cmd_import_beat(args: argparse.Namespace) -> int:
    if args.project is not None and not NAME.fullmatch(args.project):
        why = "must be 1-100 letters, digits, '.', '_' or '-' (no '/')"
        raise SpecError("--project", f"{args.project!r} {why}")
    if args.django_url:
        project, converted = _from_django(args.django_url, args.project or DJANGO_PROJECT)
        source = "django-celery-beat"
    else:
        project, converted = _from_app(args.app, args.project)
        source = args.app
    return _write(args, project, converted, source)


def _from_django(url: str, project: str) -> tuple[str, Converted]:
    from cronchain.scheduler.declare.beatimport import djangobeat
    from cronchain.scheduler.declare.beatimport.entries import convert

    entries, left_out, ignored = djangobeat.read_entries(url)
    converted = convert(entries, project, djangobeat.route_of)
    converted.left_out[:0] = left_out
    converted.ignored = ignored
    return project, converted


def _from_app(ref: str, project: str | None) -> tuple[str, Converted]:
    """The app is loaded in a process of its own (:mod:`scheduler.declare.app_process`)."""
    from cronchain.scheduler.declare.app_process import read_app

    answer = read_app("beat", ref, project)
    converted = Converted(
        jobs=[Imported(**job) for job in answer["jobs"]],
        left_out=[(name, why) for name, why in answer["left_out"]],
        notes=answer["notes"],
    )
    return answer["project"], converted


def _write(args: argparse.Namespace, project: str, converted: Converted, source: str) -> int:
    for note in converted.notes:
        print(f"cronchain: note: {note}", file=sys.stderr)
    for name, why in converted.ignored:
        print(f"cronchain: ignored beat entry {name!r}: {why}", file=sys.stderr)
    for name, why in converted.left_out:
        print(f"cronchain: left out beat entry {name!r}: {why}", file=sys.stderr)
    if converted.left_out and not args.skip_unsupported:
        print(
            f"cronchain: {len(converted.left_out)} entries have no faithful equivalent; nothing"
            " written (--skip-unsupported writes the others)",
            file=sys.stderr,
        )
        return 2
    if not converted.jobs:  # applied, an empty file would disable every job of the project
        print(f"cronchain: no entry of {source} to write; nothing written", file=sys.stderr)
        return 2
    text = job_file_text(project, converted.jobs, source)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {len(converted.jobs)} jobs of project {project} to {args.output}")
    else:
        sys.stdout.write(text)
    return 0
