"""The job file ``import-beat`` writes: one entry per beat entry, each under a comment
naming the entry and its schedule as Celery wrote it, so that the review of the diff
can check one against the other."""

from __future__ import annotations

import yaml

from scheduler.beatimport.entries import Converted


def job_file_text(project: str, converted: Converted, source: str) -> str:
    lines = [
        f"# Imported from {source} by `cronchain import-beat`.",
        "# Review it, then: cronchain apply THIS_FILE",
        f"project: {project}",
    ]
    if not converted.jobs:
        return "\n".join([*lines, "jobs: []", ""])
    lines.append("jobs:")
    for entry, job in converted.jobs:
        was = " ".join(repr(entry.schedule).split())
        lines.append(f"  # beat entry {entry.name!r}: {was}")
        text = yaml.safe_dump(
            [job], sort_keys=False, default_flow_style=None, allow_unicode=True, width=100
        )
        lines += [f"  {line}" for line in text.splitlines()]
    return "\n".join(lines) + "\n"
