"""The pages: ``GET /`` (the jobs, a page at a time), ``GET /jobs/PROJECT/NAME``,
``GET /jobs/PROJECT/NAME/runs/ID`` (one run) and ``GET /forecast`` (the coming day).

``/`` lists ``PAGE`` jobs at a time, filtered and sorted by its query string, so that a
view can be shared as a link: ``project``, ``state``, ``outcome`` (the last run that
ended succeeded or failed, or none ever did), ``q`` (a text the job's ``project/name``
holds), ``sort`` (``pages.SORTS``) and ``page``. A filter reads the jobs alone, never
the history (``scheduler.storage.pages``). The projects and
their job counts head the page. Each job's strip of its last ``STRIP`` outcomes comes
from one query for the whole page (``scheduler.storage.pages.strips``).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from flask import Flask, abort, render_template, request, url_for
from markupsafe import Markup, escape

from cronchain.scheduler.api import EARLIEST, LATEST, MAX_ID
from cronchain.scheduler.errors import CronchainError, SpecError
from cronchain.scheduler.queries import forecast as forecasting
from cronchain.scheduler.spec.model import NAME
from cronchain.scheduler.storage import alert_store, job_store, pages
from cronchain.scheduler.timing.iso import iso
from cronchain.scheduler.timing.schedules import parse_duration
from cronchain.scheduler.web import chart, csrf, jobview, links, runview
from cronchain.scheduler.web.context import context
from cronchain.scheduler.web.zones import local_text, next_tick, shown, zone_of
from cronchain.statemachine.reasons import meaning_of

PAGE = 200  # jobs a page of / lists
SEARCH = 200  # characters of a search kept (a name is at most 100, a project 100)
SORT_NAMES = {
    "name": "name",
    "next": "next tick",
    "success": "last success",
    "failure": "last failure",
}
HISTORY = 50  # runs a page of a job's history lists
RECENT = 20  # past runs the timeline shows
ALERTS = 20  # the newest alerts a job's page lists
CHARTED = 100  # runs the charts of a job's page draw


def register(app: Flask) -> None:
    app.add_url_rule("/", "jobs", jobs_page)
    app.add_url_rule("/jobs/<project>/<name>", "job", job_page)
    app.add_url_rule("/jobs/<project>/<name>/runs/<int:run_id>", "run", run_page)
    app.add_url_rule("/forecast", "forecast", forecast_page)
    app.context_processor(lambda: {"operator": context().operator})
    app.add_template_filter(iso, "iso")


def jobs_page() -> str:
    ctx = context()
    query = pages.JobQuery(
        project=_name_or_none(request.args.get("project")),
        state=_choice("state", pages.STATES),
        outcome=_choice("outcome", pages.OUTCOMES),
        text=request.args.get("q", "").strip()[:SEARCH] or None,
        sort=_choice("sort", tuple(pages.SORTS)) or "name",
    )
    number = _page_number(request.args.get("page"))
    # The page's links name the job a page starts after (or ends before), so that in name
    # order the next page is read from there, not counted from the first job.
    keys = {"after": _ref_or_none("after"), "before": _ref_or_none("before")}
    now = ctx.now()
    with ctx.db.connect() as conn:
        offset = (number - 1) * PAGE
        listed, found = pages.listing(conn, query, offset=offset, limit=PAGE, **keys)
        last = max(1, -(-found // PAGE))
        if found and (number > last or not listed):  # jobs went since the link was made
            number = 1 if keys["before"] else last  # back to the start, or the end
            offset = (number - 1) * PAGE
            listed, found = pages.listing(conn, query, offset=offset, limit=PAGE)
        strips = pages.strips(conn, [job.id for job in listed])
        projects = pages.projects(conn)
    rows = [
        {
            "job": job,
            "next": next_tick(job.tick_at, job.timezone, now) if job.tick_at else None,
            "overdue": job.tick_at is not None and job.tick_at < now - ctx.grace,
            "outcome": _outcome(job, now),
            "last_success": shown(job.last_success_at, job.timezone)
            if job.last_success_at
            else None,
            "strip": _strip(strips[job.id], job.timezone),
        }
        for job in listed
    ]
    kept = {k: v for k, v in vars(query).items() if v and not (k == "sort" and v == "name")}
    kept["q"] = kept.pop("text", None)
    return render_template(
        "jobs.html",
        rows=rows,
        projects=projects,
        query=query,
        kept={k: v for k, v in kept.items() if v},
        number=number,
        last=last,
        keyset=query.sort == "name" and bool(listed),
        first_ref=listed[0].ref if listed else None,
        last_ref=listed[-1].ref if listed else None,
        first_shown=(number - 1) * PAGE + 1 if listed else 0,
        last_shown=(number - 1) * PAGE + len(listed),
        found=found,
        states=pages.STATES,
        outcomes=pages.OUTCOMES,
        sorts=SORT_NAMES,
        strip_length=pages.STRIP,
        total=sum(n for _, n in projects),
    )


def _outcome(job: pages.JobLine, now: datetime) -> dict[str, Any] | None:
    """The job's last outcome as its column says it: ``failed``, 3 min ago."""
    at = job.last_failure_at if job.outcome == "failed" else job.last_success_at
    if at is None:
        return None
    return {"word": job.outcome, "ago": jobview.ago(at, now), "at": shown(at, job.timezone)}


def job_page(project: str, name: str) -> str:
    ctx = context()
    before = _id_or_none(request.args.get("before"))
    now = ctx.now()
    with ctx.db.connect() as conn:
        line = pages.job_line(conn, project, name)
        if line is None:
            abort(404, f"no job {project}/{name}")
        job = job_store.read_job(conn, line.id)
        attempts = job.controls.retry.max_attempts
        recent = pages.runs_of(conn, job.id, limit=RECENT)
        history = pages.runs_of(conn, job.id, before=before, limit=HISTORY + 1)
        linked = links.links(conn, job.ref, job.spec)
        raised = alert_store.listing(conn, job.id, limit=ALERTS)
        timings = pages.timings(conn, job.id, limit=CHARTED) if before is None else []
    older = history[HISTORY - 1].id if len(history) > HISTORY else None
    return render_template(
        "job.html",
        job=job,
        line=line,
        next=next_tick(line.tick_at, line.timezone, now) if line.tick_at else None,
        spec=jobview.spec_summary(job.spec, job.kind),
        timeline=jobview.timeline(
            recent,
            schedule=job.schedule,
            zone=job.timezone,
            tick_at=line.tick_at,
            paused=job.paused,
            now=now,
            days=job.days,
            max_attempts=attempts,
        ),
        history=[
            jobview.history_line(run, job.timezone, now, attempts) for run in history[:HISTORY]
        ],
        older=older,
        charts=chart.charts(
            timings,
            job.timezone,
            lambda run_id: url_for("run", project=project, name=name, run_id=run_id),
        ),
        links=linked,
        alerts=[jobview.alert_row(alert, job.timezone) for alert in raised],
        explained=_explained(job.ref),
        at=request.args.get("at", ""),
        operator=ctx.operator,
        csrf_field=csrf.FIELD,
        csrf_token=ctx.csrf_token,
        done=_done(),
    )


def run_page(project: str, name: str, run_id: int) -> str:
    ctx = context()
    now = ctx.now()
    with ctx.db.connect() as conn:
        line = pages.job_line(conn, project, name)
        run = None
        if line is not None and 0 < run_id <= MAX_ID:
            run = pages.run_detail(conn, line.id, run_id)
        if line is None or run is None:
            abort(404, f"no run {run_id} of {project}/{name}")
        raised = alert_store.of_invocation(conn, line.id, run.id)
    zone = line.timezone
    retry = None
    if run.status == "STARTING" and run.attempts and run.start_at is not None:
        retry = jobview.Moment(jobview.due_in(run.start_at, now), shown(run.start_at, zone))
    return render_template(
        "run.html",
        job=line,
        run=run,
        slot=shown(run.slot or run.created_at, zone),
        reason=None if run.reason is None else meaning_of(run.reason),
        retry=retry,
        attempts=runview.attempts(run, zone, now),
        waits=runview.waits(run, zone, now),
        alerts=[jobview.alert_row(alert, zone) for alert in raised],
        explained=_explained_slot(line.ref, run.slot),
        log=jobview.scrub(run.log),
    )


def forecast_page() -> str:
    """``cronchain forecast`` as a page: ``?window=`` (24h) and ``?threshold=`` (100)."""
    window = _window(request.args.get("window"))
    threshold = request.args.get("threshold", "")
    if threshold and not (threshold.isascii() and threshold.isdigit() and len(threshold) < 10):
        abort(400, "threshold must be a whole number from 1")
    try:
        ahead = context().scheduler.forecast(window, int(threshold or forecasting.THRESHOLD))
    except SpecError as err:
        abort(400, str(err))
    cell = (ahead.end - ahead.start).total_seconds() / len(ahead.cells)
    herds = forecasting.repeated(ahead.herds)
    return render_template(
        "forecast.html",
        ahead=ahead,
        window=request.args.get("window") or "24h",
        strip=chart.heat_strip(ahead.cells, ahead.threshold),
        cell=chart.round_label(cell) if cell == round(cell) else jobview.took(cell),
        herds=[(herd, forecasting.when(times)) for herd, times in herds[: forecasting.SHOWN]],
        more=max(0, len(herds) - forecasting.SHOWN),
    )


def _window(text: str | None) -> timedelta:
    if not text:
        return forecasting.WINDOW
    try:
        return parse_duration(text[:20], "window")
    except SpecError as err:
        abort(400, str(err))


def _explained_slot(ref: str, slot: datetime | None) -> dict[str, Any] | None:
    """What ``explain`` says of the run's slot (a triggered run has none to ask of)."""
    if slot is None:
        return None
    return _asked(ref, slot)


def _strip(runs: list[pages.Run], zone_name: str) -> Markup:
    """A job's strip, as HTML: each cell its status (the colour) and its title: slot
    (or when a triggered run was made), outcome, reason or error. Written here, each
    value escaped, rather than by a template loop: a page has 6,000 cells, and Jinja's
    loop took half of its time."""
    zone = zone_of(zone_name)
    cells = []
    for run in runs:
        what = "triggered" if run.slot is None else "slot"
        why = run.reason or jobview.scrub(run.error)
        title = f"{what} {local_text(run.slot or run.created_at, zone)}: {run.status}"
        title = f"{title} ({why})" if why else title
        cells.append(f'<span class="cell s-{escape(run.status)}" title="{escape(title)}"></span>')
    # One label for the strip, not one per cell: a screen reader says it once.
    counted = Counter(run.status for run in runs)
    said = ", ".join(f"{n} {status.lower()}" for status, n in counted.most_common()) or "none"
    label = f"last {len(runs)} runs: {said}"
    return Markup(
        f'<span class="strip" role="img" aria-label="{escape(label)}">{"".join(cells)}</span>'
    )


def _explained(ref: str) -> dict[str, Any] | None:
    """``explain``'s answer for ``?at=``, as ``cronchain explain`` gives it, or the
    reason the time was refused."""
    text = request.args.get("at", "").strip()
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return {"refused": f"{text!r} is not an ISO 8601 time"}
    if at.tzinfo is None:
        return {"refused": f"{text!r} has no time zone: add Z or an offset"}
    try:
        if not EARLIEST <= at < LATEST:
            raise OverflowError
    except OverflowError:
        return {"refused": f"{text!r} is out of range"}
    return _asked(ref, at)


def _asked(ref: str, at: datetime) -> dict[str, Any]:
    """``explain``'s answer code and text, the text with every URL's query string
    hidden (it quotes a run's error and a gate's answer, which may hold a token), or
    why it could not answer (``refused``)."""
    try:
        answer = context().scheduler.explain(ref, at)
    except CronchainError as err:
        return {"refused": str(err)}
    return {"answer": answer["answer"], "text": jobview.scrub(answer["text"])}


# What a control did, as the page that it redirects to says it (fixed texts: the query
# string picks one, it never carries text to show).
DONE = {
    "paused": "paused",
    "resumed": "resumed",
    "aborted": "aborted {n} run(s)",
    "started": "triggered: invocation {n} started",
    "buffered": "triggered: invocation {n} is WAITING for the active run",
    "waiting_upstream": "triggered: invocation {n} is WAITING for its upstreams",
    "waiting_gate": "triggered: invocation {n} is WAITING for its gates",
    "waiting_pool": "triggered: invocation {n} is WAITING for a place in its pool",
    "skipped": "triggered: recorded SKIPPED as invocation {n}",
}


def _done() -> str | None:
    code = request.args.get("done")
    if code not in DONE:
        return None
    return DONE[code].format(n=request.args.get("n", 0, type=int))


def _name_or_none(text: str | None) -> str | None:
    if not text:
        return None
    if not NAME.fullmatch(text):
        abort(400, "project must be a project's name")
    return text


def _choice(field: str, allowed: tuple[str, ...]) -> str | None:
    """A filter's value from the query string: one of ``allowed``, or none (400 for
    anything else: a link the page made never carries it)."""
    text = request.args.get(field)
    if not text:
        return None
    if text not in allowed:
        abort(400, f"{field} must be one of {', '.join(allowed)}")
    return text


def _ref_or_none(field: str) -> tuple[str, str] | None:
    """A job named in the query string as PROJECT/NAME (``after``, ``before``), as the
    page's links name it; 400 for anything else."""
    text = request.args.get(field)
    if not text:
        return None
    project, _, name = text.partition("/")
    if not (NAME.fullmatch(project) and NAME.fullmatch(name)):
        abort(400, f"{field} must be PROJECT/NAME, as the page's links give it")
    return project, name


def _page_number(text: str | None) -> int:
    if not text:
        return 1
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and int(text) >= 1):
        abort(400, "page must be a page number from 1")
    return int(text)


def _id_or_none(text: str | None) -> int | None:
    """A run id from the query (``before``), or None; 400 for anything else."""
    if not text:
        return None
    digits = text.isascii() and text.isdigit() and len(text) <= 19  # no sign, space, "²"
    if not digits or not 0 < int(text) <= MAX_ID:
        abort(400, f"before must be a run id from 1 to {MAX_ID}")
    return int(text)
