"""The manual is the site under docs/, and a manual that lags the code misleads: the site
builds strictly (a broken link or a missing page is an error), and its reference pages
fail that build when the code has a job field, setting, command, exit status, metric,
endpoint, HTTP status, state or Python name that they lack
(docs/_ext/cronchain_reference.py). These tests build it, and show that each of those
checks does catch a missing entry.

The README is the front door: two commands first, at most ~200 lines, and every link in
it leads to a file of the repository.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.repo import ROOT

DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import cronchain_reference as ref  # noqa: E402


def page(name: str) -> str:
    return (DOCS / "reference" / f"{name}.md").read_text()


def without(text: str, pattern: str) -> str:
    """``text`` without the lines that match ``pattern``; at least one must."""
    kept = [line for line in text.splitlines() if not re.search(pattern, line)]
    assert len(kept) < len(text.splitlines()), pattern
    return "\n".join(kept)


def test_the_site_builds_strictly(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q"]
        + ["-b", "html", str(DOCS), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    built = (tmp_path / "html" / "reference" / "cli.html").read_text()
    assert "--catch-up" in built  # the commands' options, written from the parser


def test_the_probes_find_the_fields_the_spec_accepts():
    fields = ref.accepted_job_fields()
    assert {"name", "schedule", "noop", "lease", "retries", "requires", "pool"} <= fields
    assert "url" in ref.accepted_options("http")
    assert "CRONCHAIN_DATABASE_URL" in ref.settings_variables()


@pytest.mark.parametrize(
    ("name", "check", "line", "missing"),
    [
        ("jobs", ref.missing_job_fields, r"^\| `timezone` \|", {"job": {"timezone"}}),
        (
            "jobs",
            ref.missing_job_fields,
            r"^\| `http` \|",
            {"job": {"http"}, "http": ref.accepted_options("http")},
        ),
        (
            "settings",
            ref.undocumented_variables,
            r"`CRONCHAIN_TICK_BATCH`",
            {"CRONCHAIN_TICK_BATCH"},
        ),
        ("cli", ref.unlisted_commands, r"^```\{cronchain-command\} pool set", {"pool set"}),
        ("cli", ref.unlisted_exit_statuses, r"^\| 141 \|", {"141"}),
        ("http", ref.unlisted_paths, r"^\| `GET /livez`", {"/livez"}),
        ("http", ref.unlisted_checks, r"^\| `work_path`", {"work_path"}),
        ("http", ref.unlisted_statuses, r"^\| `409` \|", {"409"}),
        ("statuses", ref.unlisted_states, r"^\| `OVERRUN`", {"OVERRUN"}),
        (
            "python",
            ref.undescribed_names,
            r"autofunction:: cronchain\.scheduler\.heartbeat",
            {"heartbeat"},
        ),
    ],
)
def test_each_check_catches_a_missing_entry(name, check, line, missing):  # type: ignore[no-untyped-def]
    text = page(name)
    assert not check(text), "the page as it stands lacks nothing"
    assert check(without(text, line)) == missing


def test_a_setting_documented_with_a_default_the_code_does_not_take_is_caught():
    text = page("settings")
    assert ref.wrong_defaults(text) == set()
    wrong = text.replace("| `CRONCHAIN_TICK_BATCH` | `300` |", "| `CRONCHAIN_TICK_BATCH` | `50` |")
    home = text.replace("| `./.cronchain` |", "| `./.elsewhere` |")
    assert ref.wrong_defaults(wrong) == {"CRONCHAIN_TICK_BATCH"}
    assert ref.wrong_defaults(home) == {"CRONCHAIN_HOME"}


def test_a_note_on_a_metric_that_does_not_exist_is_caught():
    text = page("metrics")
    assert ref.stale_metric_notes(text) == set()
    assert ref.stale_metric_notes(text + "\n`cronchain_gone_total`\n: a metric no more\n") == {
        "cronchain_gone_total"
    }


def test_every_metric_family_is_in_the_table_the_page_writes():
    table = ref.metrics_text()
    for family in ref.metric_families():
        assert f"`{ref.metric_name(family)}`" in table
    assert "`cronchain_job_failures_total` | counter | `project`, `job_name`" in table


README = ROOT / "README.md"


def test_the_readme_opens_with_the_two_commands_and_fits_on_two_screens():
    text = README.read_text()
    title, first = text.split("\n\n", 2)[:2]
    assert title == "# cronchain" and first.startswith("```sh\n"), first
    assert [line.split("#")[0].strip() for line in first.splitlines()[1:-1]] == [
        "make run",
        "make test",
    ]
    assert len(text.splitlines()) <= 200


def test_every_link_of_the_readme_and_the_pages_leads_to_a_file():
    """GitHub renders the pages too, where Sphinx does not check the links; a link to a
    file outside docs/ (the CHANGELOG, an example) is checked here as well."""
    broken = []
    for path in [README, *DOCS.rglob("*.md")]:
        if "_build" in path.parts:
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
            if "://" not in target and not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_benchmarks_page_is_a_current_table_not_a_diary():
    """The benchmarks page is tables of today's figures: each load's row names the
    command that reproduces it, and each row of the scale table its date and the code
    it ran (the Today table has one date and code, above it). Prose names no date: an
    account of a round belongs in the archive."""
    text = (DOCS / "benchmarks.md").read_text()
    date = re.compile(r"\b20\d\d-\d\d-\d\d\b")
    prose = [line for line in text.splitlines() if not line.startswith("|")]
    assert [line for line in prose if date.search(line)] == [
        next(line for line in prose if line.startswith("Measured on"))
    ]
    sections = re.split(r"^## ", text, flags=re.M)
    today = next(s for s in sections if s.startswith("Today"))
    loads = [row for row in today.splitlines() if row.startswith("| **")]
    assert loads and all("`python -m bench." in row for row in loads)
    scale = next(s for s in sections if s.startswith("At scale"))
    rows = [row for row in scale.splitlines() if row.startswith("| **")]
    assert len(rows) >= 10
    for row in rows:
        assert date.search(row) and "`python -m bench." in row, row
        assert re.search(r"`[0-9a-f]{7}`", row), row
