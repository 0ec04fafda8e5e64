"""The job file ``import-beat`` writes: one entry per beat entry, each under a comment
naming the entry and its schedule as Celery wrote it, so that the review of the diff
can check one against the other."""

from __future__ import annotations

import yaml

from cronchain.scheduler.declare.beatimport.entries import Imported


def job_file_text(project: str, jobs: list[Imported], source: str) -> str:
    lines = [
        f"# Imported from {source} by `cronchain import-beat`.",
        "# Review it, then: cronchain apply THIS_FILE. The workers that run these tasks",
        "# call cronchain.scheduler.install(app) (docs/concepts/runs.md, Leases).",
        f"project: {project}",
        "jobs:",
    ]
    for imported in jobs:
        lines.append(f"  # beat entry {imported.name!r}: {imported.was}")
        text = yaml.safe_dump(
            [imported.job], sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
        )
        lines += [f"  {line}" for line in text.splitlines()]
    return "\n".join(lines) + "\n"
