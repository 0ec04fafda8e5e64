"""A job's upstreams and downstreams: the jobs it depends on or sets off.

Today the one kind of edge is ``triggers`` (a job that succeeds triggers others:
``scheduler.workflows.triggergraph``); a workflow's ``requires`` (issue 16) is another kind of
edge with the same shape. Each kind is an ``EdgeKind``: the spec key that declares it
and how a declared target is resolved to ``project/name``. ``links`` reads the jobs
whose specs declare any kind, once, and finds both directions for one job, so a new kind
is one more entry in ``EDGE_KINDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from cronchain.scheduler.storage import pages
from cronchain.scheduler.workflows.triggergraph import target_ref


@dataclass(frozen=True)
class EdgeKind:
    """Edges a spec key declares: ``source`` -> each resolved target. ``upstream`` and
    ``downstream`` name the relation as the page says it, seen from either end."""

    key: str
    upstream: str  # seen from the target: "triggered by"
    downstream: str  # seen from the source: "triggers"
    resolve: Callable[[str, str], str]  # (source ref, declared target) -> target ref


EDGE_KINDS = (EdgeKind("triggers", "triggered by", "triggers", target_ref),)


@dataclass(frozen=True)
class Link:
    ref: str  # project/name
    how: str  # the relation, as the page says it


@dataclass(frozen=True)
class Links:
    upstream: list[Link]
    downstream: list[Link]


def links(conn: Connection, ref: str, spec: dict[str, Any]) -> Links:
    """The jobs linked to ``ref`` (whose stored spec is ``spec``), each way, by ref."""
    downstream = [
        Link(kind.resolve(ref, target), kind.downstream)
        for kind in EDGE_KINDS
        for target in _targets(spec, kind)
    ]
    upstream = []
    for kind in EDGE_KINDS:
        for project, name, other in pages.specs_mentioning(conn, kind.key):
            source = f"{project}/{name}"
            if any(kind.resolve(source, t) == ref for t in _targets(other, kind)):
                upstream.append(Link(source, kind.upstream))
    return Links(sorted(upstream, key=_order), sorted(downstream, key=_order))


def _targets(spec: dict[str, Any], kind: EdgeKind) -> Iterable[str]:
    targets = spec.get(kind.key) or ()
    return [t for t in targets if isinstance(t, str)]


def _order(link: Link) -> tuple[str, str]:
    return (link.how, link.ref)
