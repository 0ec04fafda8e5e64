"""Jobs that trigger or require each other: the graphs, and the cycles ``apply`` refuses.

A cycle of triggers (``a`` triggers ``b``, ``b`` triggers ``a``) turns one ``trigger``
into runs that never end; a cycle of requirements makes each job wait for the other
forever. ``apply`` refuses the edge that would close either. The graph spans
projects: an edge names ``project/name``, or a bare name in the source's own project,
as the engine resolves it when a run succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

Edges = Mapping[str, Iterable[str]]


def target_ref(source: str, target: str) -> str:
    """The job ``source`` (``project/name``) means when it names ``target``."""
    return target if "/" in target else f"{source.rpartition('/')[0]}/{target}"


def reachable_cycle(declared: Edges, known: Callable[[set[str]], Edges]) -> list[str] | None:
    """A cycle reachable from the jobs ``declared`` (their edges by ref), as a path that
    ends where it begins, or None. ``known(refs)`` gives the edges of other jobs, asked
    only for the refs the walk reaches, so that jobs without triggers cost no query."""
    edges: dict[str, list[str]] = {
        ref: [target_ref(ref, t) for t in targets] for ref, targets in declared.items()
    }
    frontier = {t for targets in edges.values() for t in targets} - set(edges)
    while frontier:
        found = known(frontier)
        for ref in frontier:
            edges[ref] = [target_ref(ref, t) for t in found.get(ref, ())]
        frontier = {t for ref in frontier for t in edges[ref]} - set(edges)
    return _find_cycle(declared, edges)


def _find_cycle(starts: Iterable[str], edges: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle reachable from ``starts``, as a path that ends where it begins: one depth
    first walk over the whole graph (linear in its edges), without recursion."""
    done: set[str] = set()
    for start in starts:
        if start in done:
            continue
        path, on_path = [start], {start}
        pending = [iter(edges.get(start, ()))]
        while pending:
            target = next(pending[-1], None)
            if target is None:
                node = path.pop()
                on_path.discard(node)
                done.add(node)
                pending.pop()
                continue
            if target in on_path:
                return [*path[path.index(target) :], target]
            if target not in done:
                path.append(target)
                on_path.add(target)
                pending.append(iter(edges.get(target, ())))
    return None
