"""The README is the manual, and a manual that lags the code misleads: these tests fail
when the code accepts a job field or reads a setting that the README does not document,
and when the README points to a section it does not have.

Every list is read from the code, none is written out here: the job fields are whatever
the spec's validator accepts (probed, see ``accepted_job_fields``), the variables are
those ``scheduler/settings.py`` reads. A field added to the code fails this test until
the README documents it; a section renamed fails it until the references follow.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec import controls
from cronchain.scheduler.spec import model as specmodel
from cronchain.scheduler.spec.jobspec import KINDS, JobSpec

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# Where the names the validator might accept are spelled; the probe decides which it does.
SPEC_SOURCES = tuple(
    ROOT / "scheduler" / "spec" / f for f in ("jobspec.py", "model.py", "controls.py")
)
SETTINGS = ROOT / "scheduler" / "settings.py"

_KEY = re.compile(r"[a-z][a-z0-9_]*")
_VARIABLE = re.compile(r"CRONCHAIN_[A-Z0-9_]+")
_UNLIKELY = "no_such_field_at_all"
_FENCE = re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)
# One italic span: single asterisks (bold's double ones excluded), within a paragraph.
_ITALIC = re.compile(r"(?<![*\w])\*(?![\s*])((?:[^*\n]|\n(?!\n))+?)(?<![\s*])\*(?![*\w])")
_LINK = re.compile(r"\[[^\]]+\]\(#([^)\s]+)\)")
_SEE = re.compile(r"\bsee\s*$", re.I)


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
    since ``None`` as the value may well be refused for other reasons (even with a
    TypeError: the validator got past its check of the names)."""
    try:
        JobSpec.from_dict("probe", entry)
    except SpecError as err:
        return not (err.field == field and err.reason == "unknown field")
    except Exception:
        return True
    return True


def accepted_job_fields() -> set[str]:
    """The top-level keys of a job entry that ``JobSpec.from_dict`` accepts.

    spec/jobspec.py keeps its allowed set inline (name, schedule, timezone, the kinds and
    ``controls.KEYS``), so it is probed: each candidate is added to a valid entry, and
    the one answer that means "not a field" is an unknown-field error naming it. A
    control the code gains later (as ``schedule_to_start`` was) is picked up by itself.
    """
    base = {"name": "probe", "schedule": "every 1m", "noop": {}}
    JobSpec.from_dict("probe", base)  # the probe is meaningful only if its base is valid
    assert not _accepts({**base, _UNLIKELY: None}, _UNLIKELY), "the probe accepts anything"
    return {key for key in _candidates() if _accepts({**base, key: None}, key)}


def accepted_options(kind: str) -> set[str]:
    """The option keys of one kind (``http: {url, method, ...}``), probed alike: each
    kind's validator rejects unknown options before it checks required ones."""
    entry = {"name": "probe", "schedule": "every 1m"}
    field = f"{kind}.{_UNLIKELY}"
    assert not _accepts({**entry, kind: {_UNLIKELY: None}}, field), f"{kind}: probe is blind"
    return {key for key in _candidates() if _accepts({**entry, kind: {key: None}}, f"{kind}.{key}")}


def settings_variables() -> set[str]:
    """The ``CRONCHAIN_*`` names that settings.py reads (its string literals)."""
    return {c for c in _string_constants([SETTINGS]) if _VARIABLE.fullmatch(c)}


# --- what the README says --------------------------------------------------------------


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where ``*`` and ``[]`` mean code."""
    return _CODE.sub("", _FENCE.sub("", text))


def headings(text: str) -> list[str]:
    return [m.group(2).replace("`", "") for m in _HEADING.finditer(_FENCE.sub("", text))]


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section, up to the next heading of its level."""
    match = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"the README has no '## {title}' section"
    return match.group(1)


def first_table(text: str) -> list[tuple[str, str]]:
    """(first cell, rest of the row) of each body row of the first table in ``text``."""
    match = re.search(r"^\|.*\n\| ?---.*\n((?:\|.*\n?)*)", text, re.M)
    assert match, "no table found"
    rows = []
    for line in match.group(1).splitlines():
        first, _, rest = line.removeprefix("|").strip().partition(" | ")
        rows.append((first, rest))
    return rows


def _code_names(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def missing_job_fields(readme: str) -> dict[str, set[str]]:
    """Accepted keys that the Jobs table does not document: top-level keys must name a
    row, a kind's options must appear in that kind's row."""
    rows = first_table(section(readme, "Jobs"))
    documented = set().union(*(_code_names(first) for first, _ in rows))
    missing = {"job": accepted_job_fields() - documented}
    for kind in KINDS:
        row = next((rest for first, rest in rows if first == f"`{kind}`"), "")
        missing[kind] = accepted_options(kind) - _code_names(row)
    return {where: keys for where, keys in missing.items() if keys}


def references(readme: str) -> set[str]:
    """Sections the README sends readers to: ``see *Leases*`` and capitalized italics.

    Lower-case italics are terms being defined (*attempt*, *misfire*), not references.
    """
    prose = _prose(readme)
    found = set()
    for match in _ITALIC.finditer(prose):
        name = " ".join(match.group(1).split())
        if _SEE.search(prose, 0, match.start()) or name[0].isupper():
            found.add(name)
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(titles: Iterable[str]) -> set[str]:
    """The anchors GitHub gives these headings; a repeated one gets ``-1``, ``-2``..."""
    seen: dict[str, int] = {}
    found = set()
    for title in titles:
        base = slug(title)
        count = seen.get(base, 0)
        found.add(f"{base}-{count}" if count else base)
        seen[base] = count + 1
    return found


def dangling_references(readme: str) -> set[str]:
    """References (``*Leases*``) and links (``[text](#leases)``) with no heading."""
    titles = headings(readme)
    known = {t.lower() for t in titles}
    dangling = {f"*{r}*" for r in references(readme) if r.lower() not in known}
    links = _LINK.findall(_prose(readme))
    return dangling | {f"#{a}" for a in links if a not in anchors(titles)}


def undocumented_variables(readme: str) -> set[str]:
    """Variables settings.py reads that the Configuration table does not list."""
    rows = first_table(section(readme, "Configuration"))
    listed = set().union(*(_code_names(first) for first, _ in rows))
    return settings_variables() - listed


# --- the tests -------------------------------------------------------------------------


def test_every_job_field_the_spec_accepts_is_in_the_jobs_table():
    """A field that works but is not in the table is one no user will find."""
    fields = accepted_job_fields()
    assert {"name", "schedule", "noop", "lease", *controls.KEYS} <= fields  # probe sanity
    assert "url" in accepted_options("http")
    assert missing_job_fields(README.read_text()) == {}


def test_every_section_the_readme_refers_to_exists():
    """``see *Leases*`` in a table is a promise; a rewrite that drops the section breaks
    it silently (as one once did to *Running invocations*)."""
    readme = README.read_text()
    assert {"Running invocations", "Leases", "HTTP jobs"} <= references(readme)
    assert dangling_references(readme) == set()


def test_every_setting_is_in_the_configuration_table():
    """Each ``CRONCHAIN_*`` variable settings.py reads is one an operator may need."""
    variables = settings_variables()
    assert "CRONCHAIN_DATABASE_URL" in variables  # the reader finds them at all
    assert undocumented_variables(README.read_text()) == set()
