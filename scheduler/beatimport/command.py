"""``cronchain import-beat``: a job file from a Celery app's beat schedule or from
django-celery-beat's tables, to review and apply.

Nothing is approximated: an entry without a faithful equivalent is named on stderr with
the reason, and then no file is written (exit 2) unless ``--skip-unsupported`` says to
write the others."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scheduler.beatimport.entries import BeatEntry, Converted, convert
from scheduler.beatimport.jobfile import job_file_text
from scheduler.specmodel import NAME

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
    c.add_argument("--project", help="the jobs' project (default: the app's name, or 'beat')")
    c.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    c.add_argument(
        "--skip-unsupported",
        action="store_true",
        help="write the entries that convert, though others were left out",
    )


def cmd_import_beat(args: argparse.Namespace) -> int:
    if args.django_url:
        from scheduler.beatimport import djangobeat

        entries, left_out = djangobeat.read_entries(args.django_url)
        project = args.project or DJANGO_PROJECT
        converted = convert(entries, project, djangobeat.queue_of)
        source = "django-celery-beat"
    else:
        from scheduler.beatimport.celeryapp import beat_entries, default_queue, load_app

        app = load_app(args.app)
        entries, left_out = beat_entries(app)
        project = args.project or (app.main if NAME.fullmatch(app.main or "") else "beat")

        def queue_of(entry: BeatEntry) -> str:
            return default_queue(app, entry.task, entry.args, entry.kwargs)

        converted = convert(entries, project, queue_of)
        source = args.app
    converted.left_out[:0] = left_out
    return _write(args, project, converted, source)


def _write(args: argparse.Namespace, project: str, converted: Converted, source: str) -> int:
    for name, why in converted.left_out:
        print(f"cronchain: left out beat entry {name!r}: {why}", file=sys.stderr)
    if converted.left_out and not args.skip_unsupported:
        print(
            f"cronchain: {len(converted.left_out)} entries have no faithful equivalent; nothing"
            " written (--skip-unsupported writes the others)",
            file=sys.stderr,
        )
        return 2
    text = job_file_text(project, converted, source)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {len(converted.jobs)} jobs of project {project} to {args.output}")
    else:
        sys.stdout.write(text)
    return 0
