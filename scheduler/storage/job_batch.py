"""Many jobs' writes held in memory, then written in a few statements.

``apply`` of a file of 100,000 jobs wrote each job on its own (an insert, a change
record, a lock, a save, another change record): 231 s, nearly all of it round trips.
A :class:`JobBatch` takes the same writes, job by job, made by the functions that make
``insert_job``'s and ``save_job``'s, keeps each job's last row, and writes them all at
the end: the new jobs in a COPY, the saves in one UPDATE, the change records in another
COPY (``scheduler.storage.bulk``; executemany on SQLite). The rows and change records
are the ones the one-job path writes; only the number of statements differs.

The caller's transaction must hold the rows it saves locked (``lock_jobs``) and
write the batch before it commits. Each save still checks the generation it read: a row
changed by another transaction makes the write raise ``ConcurrentUpdate``, as
``save_job`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from cronchain.scheduler.storage import job_store
from cronchain.scheduler.storage.rows import JobRow
from cronchain.statemachine import JobSnapshot, JobState

if TYPE_CHECKING:
    from cronchain.scheduler.spec.jobspec import JobSpec

# Rows per statement, and the step at which a progress bar moves.
CHUNK = 5000
_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(JobRow)) - {"id", "snapshot"}

Advance = Callable[[int], None]


def _ignore(count: int) -> None:
    pass


class JobBatch:
    """Inserts and saves of jobs, held until :meth:`write`. ``add`` a new job and
    ``save`` a job's step as ``insert_job`` and ``save_job`` would write them; each
    returns the job as a read after the write would return it, to step again."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._new: dict[int, dict[str, Any]] = {}  # job id -> the row to insert
        self._saved: dict[int, dict[str, Any]] = {}  # job id -> the columns to update
        self._read: dict[int, int] = {}  # job id -> the generation it was read at
        self._changes: list[dict[str, Any]] = []

    def __len__(self) -> int:
        """How many jobs the batch writes."""
        return len(self._new) + len(self._saved)

    def add(self, spec: JobSpec, job_id: int) -> JobRow:
        """A new job, disabled, and its ``created`` record, as ``insert_job`` writes them;
        ``job_id`` is one of ``job_store.reserve_job_ids``."""
        row = self._new[job_id] = job_store.new_job_values(spec, self.now)
        row["id"] = job_id
        self._changes.append(job_store.created(job_id, spec, self.now))
        return _as_read(row)

    def save(
        self,
        job: JobRow,
        snapshot: JobSnapshot,
        *,
        watchdog_at: datetime | None,
        spec: JobSpec | None = None,
        **flags: Any,
    ) -> JobRow:
        """Hold what ``save_job`` would write; returns the job as saved."""
        values = job_store.saved_values(
            job, snapshot, watchdog_at=watchdog_at, now=self.now, spec=spec, **flags
        )
        self._changes += job_store.change_records(job, self.now, spec=spec, **flags)
        row = self._new.get(job.id)
        if row is not None:
            row.update(values)
            return _as_read(row)
        self._read.setdefault(job.id, job.generation)
        self._saved[job.id] = self._saved.get(job.id, {}) | values
        fields = {k: v for k, v in values.items() if k in _ROW_FIELDS}
        return dataclasses.replace(job, snapshot=snapshot, **fields)

    def write(self, conn: Connection, advance: Advance = _ignore) -> None:
        """Write what is held, in ``conn``'s transaction, and empty the batch.
        ``advance(n)`` is called as each ``n`` jobs are written."""
        for chunk in _chunks(list(self._new.values())):
            job_store.insert_jobs(conn, chunk)
            advance(len(chunk))
        groups: dict[frozenset[str], list[dict[str, Any]]] = {}
        for job_id, values in self._saved.items():  # one UPDATE per set of columns
            keys = {"b_id": job_id, "b_generation": self._read[job_id]}
            groups.setdefault(frozenset(values), []).append(values | keys)
        for group in groups.values():
            for chunk in _chunks(group):
                job_store.save_jobs(conn, chunk)
                advance(len(chunk))
        for chunk in _chunks(self._changes):
            job_store.record_changes(conn, chunk)
        self._new, self._saved, self._read, self._changes = {}, {}, {}, []


def _as_read(row: dict[str, Any]) -> JobRow:
    """A held row of a new job as ``JobRow.from_row`` reads it back (twice as quick)."""
    snapshot = JobSnapshot(
        state=JobState(row["state"]),
        tick_at=row["tick_at"],
        tick_nonce=row["tick_nonce"],
        invocation_id=row["invocation_id"],
        invocation_running=row["invocation_running"],
        overruns=row["overruns"],
        active=row["active"],
        buffered=row["buffered"],
        missed_from=row["missed_from"],
    )
    return JobRow(id=row["id"], snapshot=snapshot, **{k: row[k] for k in _ROW_FIELDS})


def _chunks(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [rows[i : i + CHUNK] for i in range(0, len(rows), CHUNK)]
