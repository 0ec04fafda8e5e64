"""Job files are bounded before they are expanded (issue 14).

Each malformed class is refused with a one-line message, well under a second and with
little memory, measured here in the test process. The bounds (2 s, 64 MB) are 10-100x
above what the loader takes on a loaded machine; without the bounds the same inputs take
minutes and gigabytes (``yaml.safe_load`` of a 9-level alias bomb is instant because
aliases share one object, but any walk of the result, hashing or validating it, expands
3 billion nodes; a 30-level merge bomb makes ``safe_load`` itself double 30 times), or
end in a RecursionError or a segmentation fault (the C loader, 100,000 levels deep).
"""

from __future__ import annotations

import random
import re
import string
import time
import tracemalloc
from pathlib import Path
from unittest import mock

import pytest
import yaml

from cronchain.scheduler.errors import SpecError
from cronchain.scheduler.spec import yamlfile
from cronchain.scheduler.spec.yamlfile import (
    EXPANSION_FACTOR,
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MIN_EXPANDED_NODES,
    load_yaml,
    read_yaml_file,
)
from tests.support.repo import manual

SECONDS = 2.0
PEAK_BYTES = 64 * 1024 * 1024
README = Path(__file__).resolve().parents[2] / "README.md"


def refused(data: bytes) -> str:
    """The one-line message ``load_yaml`` refuses ``data`` with, inside the bounds.

    PyYAML's own parser (used where libyaml is missing) must refuse it the same way,
    bar the wording of a syntax error.
    """
    message = refused_by(yamlfile._Parser, data)
    with mock.patch.object(yamlfile, "_Parser", yaml.SafeLoader):
        in_python = refused_by(yaml.SafeLoader, data)
    if "not valid YAML" not in message:
        assert in_python == message
    return message


def refused_by(parser: type, data: bytes) -> str:
    """Timed on its own, then measured again under tracemalloc (which slows it 4x)."""
    assert yamlfile._Parser is parser
    started = time.perf_counter()
    with pytest.raises(SpecError) as caught:
        load_yaml(data, "jobs.yaml")
    elapsed = time.perf_counter() - started
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as again:
            load_yaml(data, "jobs.yaml")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert caught.value.field == "file" and caught.value.where == "jobs.yaml"
    assert "\n" not in message and str(again.value) == message
    assert elapsed < SECONDS, f"{parser.__name__}: {elapsed:.2f} s to refuse"
    assert peak < PEAK_BYTES, f"{parser.__name__}: {peak / 2**20:.1f} MB to refuse"
    return message


def alias_bomb(levels: int, width: int = 9) -> bytes:
    """'Billion laughs': each level is a list of ``width`` aliases of the one before."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]")
    return ("\n".join(lines) + "\n").encode()


def merge_bomb(levels: int) -> bytes:
    """Each level merges the one before twice: PyYAML's merge doubles its pairs."""
    lines = ["m0: &m0 {a: 1, b: 2}"]
    for i in range(1, levels + 1):
        lines.append(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: {i}}}")
    return ("\n".join(lines) + "\n").encode()


# --- malformed files ---------------------------------------------------------------------


@pytest.mark.parametrize("levels", [6, 8, 9, 30])
def test_an_alias_bomb_is_refused_at_its_first_big_level(levels: int):
    # 9 levels expand to 9**10 = 3.5 billion nodes, about 10 GB of text; 30 to 10**28.
    message = refused(alias_bomb(levels))
    assert "line 7 column 5: aliases expand this list to more than 1,000,000 nodes " in message


def test_a_wide_alias_list_is_refused():
    data = b"a: &a [" + b"x, " * 1000 + b"x]\nb: [" + b"*a, " * 1000 + b"*a]\n"
    assert "line 2 column 4: aliases expand this list to more than 1,000,000" in refused(data)


@pytest.mark.parametrize("levels", [20, 30])
def test_a_merge_key_bomb_is_refused(levels: int):
    # Refused at the list [*m16, *m16] of line 18; safe_load takes 14 s at 22 levels.
    message = refused(merge_bomb(levels))
    assert "line 18 column 16: aliases expand this list to more than 1,000,000 nodes" in message


def test_merged_values_that_multiply_are_refused():
    lines = ["m0: &m0 {a: [x, y, z]}"]
    for i in range(1, 40):
        lines.append(f"m{i}: &m{i} {{<<: *m{i - 1}, v{i}: *m{i - 1}, w{i}: *m{i - 1}}}")
    assert "aliases expand this mapping" in refused("\n".join(lines).encode())


def test_the_budget_follows_the_size_of_the_file():
    # An anchor of 1,000 nodes used 2,000 times (2,000,000 nodes expanded) in a file of
    # 3,000 nodes is refused; with 300,000 plain nodes beside it, it is within 10x.
    anchor = "defaults: &d [" + ", ".join(["x"] * 999) + "]\n"
    uses = "uses: [" + ", ".join(["*d"] * 2000) + "]\n"
    assert "aliases expand this list" in refused((anchor + uses).encode())
    padding = "padding: [" + ", ".join(["p"] * 300_000) + "]\n"
    data = load_yaml((anchor + padding + uses).encode(), "jobs.yaml")
    assert len(data["uses"]) == 2000 and data["uses"][0] is data["defaults"]
    assert MIN_EXPANDED_NODES < 2_301_000 < EXPANSION_FACTOR * 301_000


@pytest.mark.parametrize(
    "style, data",
    [
        ("block mapping", "".join(" " * i + f"k{i}:\n" for i in range(200)) + " " * 200 + "x"),
        ("block list", "".join(" " * (2 * i) + "-\n" for i in range(200)) + " " * 400 + "x"),
        ("compact block list", "- " * 100 + "x\n"),
        ("flow list", "[" * 100 + "]" * 100),
        ("flow mapping", "{a: " * 100 + "b" + "}" * 100),
    ],
)
def test_nesting_deeper_than_the_bound_is_refused(style: str, data: str):
    assert f"nested deeper than {MAX_DEPTH} levels" in refused(data.encode())


@pytest.mark.parametrize("depth", [100_000, 1_000_000])
def test_brackets_a_million_deep_are_refused_at_once(depth: int):
    # The C loader dies of a segmentation fault at 100,000 levels; the pure Python one
    # raises RecursionError at 1,000.
    # PyYAML 6.0.4's scanner has a bound of its own (1,000 flow levels), met before
    # cronchain's sees the events of one long line: either refusal is at once, unharmed.
    message = refused(b"[" * depth + b"]" * depth)
    assert message in (
        f"jobs.yaml: file: line 1 column 65: nested deeper than {MAX_DEPTH} levels",
        "jobs.yaml: file: not valid YAML: line 1 column 1001: exceeded maximum nesting depth"
        " (while increasing flow level from line 1)",
    )


def test_aliases_may_not_nest_deeper_than_the_bound_either():
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 80)]
    message = refused("\n".join(lines).encode())
    assert f"line 64 column 12: alias *a62 nests the data deeper than {MAX_DEPTH}" in message


def test_an_alias_inside_its_own_anchor_is_refused():
    assert "line 1 column 8: alias *a is inside the node it names" in refused(b"a: &a [*a]")
    assert "alias *b names no anchor before it" in refused(b"a: [*b]\nb: &b 1")
    assert "line 2 column 4: anchor &a is defined twice" in refused(b"a: &a 1\nb: &a 2")


def test_bytes_that_are_not_utf8_are_refused_with_their_place():
    message = refused(b"project: demo\njobs:\n  - name: caf\xe9\n")
    assert message == ("jobs.yaml: file: not UTF-8: byte 0xe9 at offset 33 (line 3 column 14)")
    assert "not UTF-8: byte 0xff at offset 0" in refused("project: x".encode("utf-16"))


def test_a_control_character_is_refused():
    message = refused("project: é\njobs: ab\x07c\n".encode())
    assert message == "jobs.yaml: file: line 2 column 9: control character #x07 is not allowed"


def test_a_file_over_the_size_bound_is_refused_before_it_is_read(tmp_path: Path):
    data = b"project: demo\n" + b"#" * MAX_FILE_BYTES
    assert "larger than 33,554,432 bytes (32 MiB)" in refused(data)
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.truncate(4 * MAX_FILE_BYTES)  # sparse: 128 MiB of NUL bytes, none stored
    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match=r"huge.yaml: file: larger than 33,554,432 bytes"):
            read_yaml_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_missing_file_says_so(tmp_path: Path):
    with pytest.raises(SpecError, match=r"nope.yaml: file: No such file or directory"):
        read_yaml_file(tmp_path / "nope.yaml")


def test_a_key_written_twice_is_refused():
    data = b"project: demo\njobs:\n  - name: a\n    lease: 1m\n    noop: {}\n    lease: 2m\n"
    message = refused(data)
    assert message == "jobs.yaml: file: line 6 column 5: duplicate key 'lease' in this mapping"
    assert "line 1 column 8: duplicate key 'a'" in refused(b'{a: 1, "a": 2}')
    assert "duplicate key '<<'" in refused(b"d: &d {a: 1}\nj: {<<: *d, <<: *d}")


def test_a_syntax_error_is_one_line_with_its_place():
    data = b"project: demo\njobs:\n  - name: a\n   schedule: b\n"
    assert refused(data) == (
        "jobs.yaml: file: not valid YAML: line 4 column 4: did not find expected '-' "
        "indicator (while parsing a block collection from line 3)"
    )
    message = refused(b"jobs: [a, b\nproject: x\n")
    assert re.fullmatch(r"jobs.yaml: file: not valid YAML: line 2 column \d+: .+", message)


def test_one_document_only():
    assert "line 2 column 1: a second YAML document" in refused(b"a: 1\n---\nb: 2\n")


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"a: !!binary aGVsbG8=", "tag !!binary is not allowed"),
        (b"a: !!set {x, y}", "tag !!set is not allowed"),
        (b"a: !!omap [x: 1]", "tag !!omap is not allowed"),
        (b"a: !!timestamp 2024-01-01", "tag !!timestamp is not allowed"),
        (b"a: !!python/object:os.system {}", "tag !!python/object:os.system is not allowed"),
        (b"a: !!python/name:os.system ''", "tag !!python/name:os.system is not allowed"),
        (b"a: !local x", "tag !local is not allowed"),
        (b"start: 2024-01-01", "'2024-01-01' reads as a date; quote it"),
        (b"a: !!int twelve", "'twelve' is not a valid !!int"),
        (b"a: !!bool maybe", "'maybe' is not a valid !!bool"),
        (b'a: !!int ""', "'' is not a valid !!int"),
        (b'a: !!float ""', "'' is not a valid !!float"),
        (b"200: ok", "line 1 column 1: a key is a number (200): job files take string keys"),
        (b"true: push", "a key is a boolean (True)"),
        (b"? [a, b]\n: c", "a key is a list"),
        (b"<<: [a]", "'<<' merges a mapping or a list of mappings"),
    ],
)
def test_only_json_types(data: bytes, reason: str):
    assert reason in refused(data)


# --- legit files -------------------------------------------------------------------------

LEGIT = {
    "anchors": """
defaults: &defaults
  lease: 2m
  retries: {max_attempts: 3, backoff: 30s}
project: demo
jobs:
  - <<: *defaults
    name: a
    schedule: "*/5 * * * *"
    noop: {}
  - <<: [{lease: 5m, overlap: skip}, *defaults]
    name: b
    schedule: "@daily"
    lease: 1m
    celery: {task: t.x, args: &args [1, 2.5, -0x1F, 017, 1_000, 1:30, .inf, yes, No, ~]}
  - name: c
    schedule: every 5s
    noop:
    tags: [*args, *args]
""",
    "unicode": "project: dé mo\njobs:\n  - name: 'ünï'\n    schedule: \"@daily\" # ✓\n"
    '    http: {url: "https://example.org/✓", headers: {X-Emoji: "🎉\\u00e9"}}\n',
    "bom": "\ufeffproject: demo\njobs: []\n",
    "scalars": "a: >\n  folded\n  text\nb: |\n  lit\n   eral\nc: ''\nd:\ne: 'it''s'\nf: !!str 12\n",
    "empty": "",
    "comment only": "# nothing\n",
    "explicit document": "---\nproject: demo\n...\n",
    "just under the depth bound": "[" * MAX_DEPTH + "]" * MAX_DEPTH,
}


@pytest.mark.parametrize("name", LEGIT)
def test_legit_files_read_as_safe_load_reads_them(name: str):
    text = LEGIT[name]
    assert_same_as_safe_load(text)


def test_the_manual_and_example_files_read_as_safe_load_reads_them():
    """Every yaml block of the manual and every example file (but the Kubernetes
    manifests, several documents a file, which are no job files)."""
    blocks = re.findall(r"```yaml\n(.*?)```", manual(), flags=re.S)
    examples = sorted((README.parent / "examples").rglob("*.yaml"))
    examples = [path for path in examples if "kubernetes" not in path.parts]
    texts = [*blocks, *(path.read_text() for path in examples)]
    assert len(texts) > 3
    for text in texts:
        try:
            yaml.safe_load(text)
        except yaml.YAMLError:
            continue  # a fragment of a job file
        assert_same_as_safe_load(text)


def test_aliases_are_shared_as_safe_load_shares_them():
    data = load_yaml(b"a: &a [1]\nb: *a\nc: {<<: &m {x: [2]}}\nd: *m\n", "jobs.yaml")
    assert data["a"] is data["b"] and data["c"]["x"] is data["d"]["x"]
    assert data["c"] is not data["d"]


def test_random_documents_read_as_safe_load_reads_them():
    # Differential: seeded random JSON-like data, dumped by PyYAML in block and flow style
    # (shared objects become anchors and aliases), read by both.
    rng = random.Random(14)
    for _ in range(300):
        value = random_value(rng, depth=0)
        shared = random_value(rng, depth=2)
        document = {"shared": shared, "again": shared, "value": value}
        text = yaml.safe_dump(document, default_flow_style=rng.choice([None, True, False]))
        assert_same_as_safe_load(text)


def test_a_file_of_100000_jobs_loads_in_seconds():
    lines = ["project: big", "defaults: &defaults", "  lease: 2m", "  retries: {max_attempts: 3}"]
    lines.append("jobs:")
    for i in range(100_000):
        if i % 1000 == 0:
            lines += [
                "  - <<: *defaults",
                f"    name: job-{i}",
                '    schedule: "@daily"',
                "    noop: {}",
            ]
        else:
            lines.append(f'  - {{name: job-{i}, schedule: "*/5 * * * *", noop: {{}}}}')
    data = ("\n".join(lines) + "\n").encode()
    started = time.perf_counter()
    loaded = load_yaml(data, "big.yaml")
    elapsed = time.perf_counter() - started
    assert len(loaded["jobs"]) == 100_000 and elapsed < 15, f"{elapsed:.1f} s"  # 1.2 s here
    assert loaded["jobs"][1000] == {
        "lease": "2m",
        "retries": {"max_attempts": 3},
        "name": "job-1000",
        "schedule": "@daily",
        "noop": {},
    }
    assert loaded["jobs"][1001] == {"name": "job-1001", "schedule": "*/5 * * * *", "noop": {}}


def test_yaml_1_1_words_as_keys_are_words():
    """``alerts: {on: [...]}``: YAML 1.1 reads ``on`` as true; as a key, a job file
    means the word (as YAML 1.2 does). As a value it stays what safe_load reads."""
    assert load_yaml(b"on: [failed]\nyes: 1\nOff: no", "jobs.yaml") == {
        "on": ["failed"],
        "yes": 1,
        "Off": False,
    }


_WORDS = ("on", "off", "yes", "no", "y", "n")


class _Yaml12Keys(yaml.SafeLoader):
    """safe_load, with the keys that cronchain reads as words read so."""

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        for key, _ in node.value:
            if key.tag.endswith(":bool") and key.value.lower() in (
                "on",
                "off",
                "yes",
                "no",
                "y",
                "n",
            ):
                key.tag = "tag:yaml.org,2002:str"
        return super().construct_mapping(node, deep)


def assert_same_as_safe_load(text: str) -> None:
    mine = load_yaml(text.encode(), "jobs.yaml")
    theirs = yaml.load(text, Loader=_Yaml12Keys)  # noqa: S506 (a SafeLoader)
    assert mine == theirs
    # The same types (1 is not 1.0 nor True). Not the order of merged keys, which
    # PyYAML 6.0.4 changed and which means nothing in a job file.
    assert _typed(mine) == _typed(theirs)


def _typed(value: object) -> object:
    if isinstance(value, dict):
        return sorted((repr(k), _typed(v)) for k, v in value.items())
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return repr(value)


def random_value(rng: random.Random, depth: int) -> object:
    kinds = ["str", "int", "float", "bool", "null"] + (["list", "dict"] * 2 if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == "dict":
        return {random_text(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}
    return {
        "str": lambda: random_text(rng),
        "int": lambda: rng.randrange(-(10**6), 10**6),
        "float": lambda: rng.choice([rng.uniform(-1e6, 1e6), 0.5, 1e300, float("inf")]),
        "bool": lambda: rng.random() < 0.5,
        "null": lambda: None,
    }[kind]()


def random_text(rng: random.Random) -> str:
    pieces = [
        string.ascii_letters,
        string.digits,
        " :-#&*!|>'\"%@`,[]{}?",
        "éü✓🎉",
        "\n\t",
    ]
    special = ["yes", "no", "on", "null", "~", "<<", "=", "0x1F", "012", "1:30", "1e3", ".nan"]
    if rng.random() < 0.2:
        return rng.choice(special)
    alphabet = "".join(rng.sample(pieces, k=rng.randrange(1, len(pieces) + 1)))
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
