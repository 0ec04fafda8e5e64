"""Job files read as YAML with bounds that hold before anything is expanded.

A jobs folder is read every minute, so a file must not be able to stall or kill beat.
With ``yaml.safe_load`` a 1 KB file whose aliases multiply took 26 s and 1.2 GB before
the spec refused it, deep nesting ends in a ``RecursionError`` (in a segmentation fault
with the C loader), and of two equal keys the last is kept without a word.

:func:`load_yaml` reads the parser's events (libyaml's when it is there) and builds the
Python data itself, with an explicit stack, so that each bound is checked as the events
arrive:

- a file is at most :data:`MAX_FILE_BYTES`, in UTF-8 (a BOM is fine);
- one YAML document, nested at most :data:`MAX_DEPTH` levels, aliases included;
- aliases and merge keys (``<<: *defaults``) may make the document at most
  max(:data:`MIN_EXPANDED_NODES`, :data:`EXPANSION_FACTOR` x the nodes written) nodes
  large once expanded. The expanded size of each anchor is counted once, when it ends,
  so the count is linear in the file while a bomb is refused at its first big level;
- JSON's types only: strings, numbers, booleans, null, lists and mappings with string
  keys; a key written twice in one mapping is refused, since the job would silently
  lose a field.

Every refusal is a :class:`SpecError` on the field ``file`` with one line that says
where (``line 4 column 7: ...``). For a legit file the result equals
``yaml.safe_load``'s, aliases included (an alias is the same Python object).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode
from yaml.reader import ReaderError

from cronchain.scheduler.errors import SpecError

# A 100,000-job file is 6 MB of YAML (a line per job) to 20 MB (six lines, http options
# and a merge key each); 32 MiB is the next round bound above. Reading is linear: a
# 20 MB job file takes 3.5 s and 230 MB; the worst file at the bound (eleven million
# empty mappings) 25 s and 740 MB.
MAX_FILE_BYTES = 32 * 1024 * 1024
# A job file nests about 6 levels (jobs, a job, http, headers, ...): 64 is room enough
# and keeps every later walk of the data (hashing, validation) far from Python's
# recursion limit.
MAX_DEPTH = 64
# Aliases may expand a document to this many nodes whatever its size: a small file can
# share a defaults block among thousands of jobs. A bomb multiplies at each level, so
# it crosses this in a few levels and a millisecond all the same.
MIN_EXPANDED_NODES = 1_000_000
# ...and a large one to 10 times the nodes written. ``<<: *defaults`` in every job
# expands each job by the size of the defaults: 10x allows defaults several times
# bigger than a job's own fields, while a bomb multiplies by its width at each level.
EXPANSION_FACTOR = 10

_TAG = "tag:yaml.org,2002:"
_INT, _MERGE_TAG, _STR, _TIMESTAMP, _VALUE = (
    _TAG + t for t in ("int", "merge", "str", "timestamp", "value")
)
_MAP_TAGS = {None, "!", _TAG + "map"}
_SEQ_TAGS = {None, "!", _TAG + "seq"}
_SCALAR_TAGS = {_TAG + t for t in ("str", "int", "float", "bool", "null")}
_IMPLICIT = {
    first: resolvers + yaml.SafeLoader.yaml_implicit_resolvers.get(None, [])
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    if first is not None
}
_NUMBERS = SafeConstructor()
_MERGE = object()  # the key '<<' (a plain scalar), whose value is merged
_NO_KEY = object()  # a mapping waiting for its next key

# libyaml's parser when PyYAML has it (fed the bytes), else the same events in Python.
_Parser = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml_file(path: str | Path) -> Any:
    """Read a YAML file as :func:`load_yaml` does, reading no more than the bound."""
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size > MAX_FILE_BYTES:
                raise _too_big(str(path))
            data = file.read(MAX_FILE_BYTES + 1)  # a pipe or /proc file has no size
    except OSError as err:
        raise SpecError("file", err.strerror or str(err), where=str(path)) from None
    return load_yaml(data, str(path))


def load_yaml(data: bytes, source: str) -> Any:
    """The data of one YAML document, or :class:`SpecError` (``where=source``).

    ``source`` names the file in the message. An empty file is ``None``, as for
    ``yaml.safe_load``.
    """
    if len(data) > MAX_FILE_BYTES:
        raise _too_big(source)
    text = _utf8(data, source)
    fed = text if _Parser is yaml.SafeLoader else data
    del text  # libyaml reads the bytes: only the check needed them decoded
    try:
        return _Composer(source).run(_Parser(fed))
    except yaml.MarkedYAMLError as err:
        raise SpecError("file", _syntax_error(err), where=source) from None
    except ReaderError as err:
        line, column = _line_column(fed, err.position)
        why = f"line {line} column {column}: control character #x{err.character:02x} is not allowed"
        raise SpecError("file", why, where=source) from None
    except yaml.YAMLError as err:
        raise SpecError("file", f"not valid YAML: {_one_line(str(err))}", where=source) from None


def _too_big(source: str) -> SpecError:
    bound = f"{MAX_FILE_BYTES:,} bytes ({MAX_FILE_BYTES >> 20} MiB)"
    return SpecError("file", f"larger than {bound}, the bound for a YAML file", where=source)


def _utf8(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line, column = _line_column(data, err.start)
        bad = data[err.start : err.start + 1].hex()
        why = f"not UTF-8: byte 0x{bad} at offset {err.start} (line {line} column {column})"
        raise SpecError("file", why, where=source) from None


def _line_column(fed: bytes | str, offset: int) -> tuple[int, int]:
    """Line and column (in characters, from 1) of an offset in what the parser read."""
    if isinstance(fed, str):
        start = fed.rfind("\n", 0, offset) + 1
        return fed.count("\n", 0, offset) + 1, offset - start + 1
    start = fed.rfind(b"\n", 0, offset) + 1
    column = len(fed[start:offset].decode("utf-8", "replace")) + 1
    return fed.count(b"\n", 0, offset) + 1, column


def _syntax_error(err: yaml.MarkedYAMLError) -> str:
    mark = err.problem_mark or err.context_mark
    where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
    what = err.problem or err.context or "invalid"
    if err.context and err.problem:
        since = f" from line {err.context_mark.line + 1}" if err.context_mark else ""
        what = f"{what} ({err.context}{since})"
    return f"not valid YAML: {where}{_one_line(what)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Frame:
    """A sequence or mapping being read: its value so far and what aliases add to it."""

    __slots__ = ("value", "is_map", "anchor", "mark", "size", "height", "key", "merges")

    def __init__(self, value: Any, is_map: bool, anchor: str | None, mark: Any):
        self.value = value
        self.is_map = is_map
        self.anchor = anchor
        self.mark = mark
        self.size = 1  # nodes once aliases are expanded, this one included
        self.height = 0  # levels below this one, aliases expanded
        self.key: Any = _NO_KEY
        self.merges: list[dict[str, Any]] | None = None


class _Composer:
    """Builds the data from parser events, refusing as soon as a bound is crossed.

    Each anchor keeps ``(value, size, height)``: the expanded size and depth of what it
    names, so that an alias costs one addition whatever it expands to.
    """

    def __init__(self, source: str):
        self.source = source
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[Any, int, int]] = {}
        self.open_anchors: set[str] = set()
        self.written = 0  # nodes as written (an alias is one)
        self.documents = 0
        self.root: Any = None

    def run(self, parser: Any) -> Any:
        handlers = {
            ScalarEvent: self._scalar,
            MappingStartEvent: self._mapping_start,
            MappingEndEvent: self._end,
            SequenceStartEvent: self._sequence_start,
            SequenceEndEvent: self._end,
            AliasEvent: self._alias,
            DocumentStartEvent: self._document_start,
            DocumentEndEvent: _ignore,
            StreamStartEvent: _ignore,
        }
        get_event = parser.get_event
        try:
            while True:
                event = get_event()
                if event.__class__ is StreamEndEvent:
                    return self.root
                handlers[event.__class__](event)
        finally:
            parser.dispose()

    def refuse(self, mark: Any, reason: str) -> SpecError:
        where = f"line {mark.line + 1} column {mark.column + 1}"
        return SpecError("file", f"{where}: {reason}", where=self.source)

    # --- events ------------------------------------------------------------------------

    def _document_start(self, event: DocumentStartEvent) -> None:
        self.documents += 1
        if self.documents > 1:
            raise self.refuse(event.start_mark, "a second YAML document; a job file holds one")

    def _scalar(self, event: ScalarEvent) -> None:
        self.written += 1
        value, is_merge = self._scalar_value(event)
        if isinstance(value, bool) and event.value.lower() in _YAML11_WORDS and self._at_key():
            value = event.value  # ``on:`` (alerts' key) is a word, as YAML 1.2 reads it
        if event.anchor is not None:
            self._open_anchor(event.anchor, event.start_mark)
            self.open_anchors.discard(event.anchor)
            self.anchors[event.anchor] = (value, 1, 0)
        self._place(value, 1, 0, event.start_mark, is_merge)

    def _at_key(self) -> bool:
        return bool(self.stack) and self.stack[-1].is_map and self.stack[-1].key is _NO_KEY

    def _mapping_start(self, event: MappingStartEvent) -> None:
        if event.tag not in _MAP_TAGS:
            raise self.refuse(event.start_mark, _tag_refusal(event.tag))
        self._start(event, {}, True)

    def _sequence_start(self, event: SequenceStartEvent) -> None:
        if event.tag not in _SEQ_TAGS:
            raise self.refuse(event.start_mark, _tag_refusal(event.tag))
        self._start(event, [], False)

    def _start(self, event: Any, value: Any, is_map: bool) -> None:
        self.written += 1
        if len(self.stack) >= MAX_DEPTH:
            raise self.refuse(event.start_mark, f"nested deeper than {MAX_DEPTH} levels")
        if event.anchor is not None:
            self._open_anchor(event.anchor, event.start_mark)
        self.stack.append(_Frame(value, is_map, event.anchor, event.start_mark))

    def _end(self, event: Any) -> None:
        frame = self.stack.pop()
        value = frame.value
        if frame.merges is not None:
            value = _merged(frame.merges, value)
        budget = max(MIN_EXPANDED_NODES, EXPANSION_FACTOR * self.written)
        if frame.size > budget:
            raise self.refuse(
                frame.mark,
                f"aliases expand this {'mapping' if frame.is_map else 'list'} to more than "
                f"{budget:,} nodes ({self.written:,} written so far)",
            )
        height = frame.height + 1
        if frame.anchor is not None:
            self.open_anchors.discard(frame.anchor)
            self.anchors[frame.anchor] = (value, frame.size, height)
        self._place(value, frame.size, height, frame.mark, False)

    def _alias(self, event: AliasEvent) -> None:
        self.written += 1
        name = event.anchor
        if name in self.open_anchors:
            raise self.refuse(event.start_mark, f"alias *{name} is inside the node it names")
        if name not in self.anchors:
            raise self.refuse(event.start_mark, f"alias *{name} names no anchor before it")
        value, size, height = self.anchors[name]
        if len(self.stack) + height > MAX_DEPTH:
            why = f"alias *{name} nests the data deeper than {MAX_DEPTH} levels"
            raise self.refuse(event.start_mark, why)
        self._place(value, size, height, event.start_mark, False)

    # --- building ----------------------------------------------------------------------

    def _open_anchor(self, name: str, mark: Any) -> None:
        if name in self.anchors or name in self.open_anchors:
            raise self.refuse(mark, f"anchor &{name} is defined twice")
        self.open_anchors.add(name)

    def _place(self, value: Any, size: int, height: int, mark: Any, is_merge: bool) -> None:
        """Put a finished node into the collection being read (or make it the root)."""
        if not self.stack:
            self.root = value
            return
        frame = self.stack[-1]
        frame.size += size
        if height > frame.height:
            frame.height = height
        if not frame.is_map:
            frame.value.append(value)
        elif frame.key is _NO_KEY:
            frame.key = self._key(frame, value, mark, is_merge)
        elif frame.key is _MERGE:
            frame.merges = self._merge_sources(value, mark)
            frame.key = _NO_KEY
        else:
            frame.value[frame.key] = value
            frame.key = _NO_KEY

    def _key(self, frame: _Frame, key: Any, mark: Any, is_merge: bool) -> Any:
        if is_merge:
            if frame.merges is not None:
                raise self.refuse(mark, "duplicate key '<<' (merge a list: <<: [*a, *b])")
            return _MERGE
        if not isinstance(key, str):
            what = _json_type(key)
            raise self.refuse(mark, f"a key is {what}: job files take string keys (quote it)")
        if key in frame.value:
            raise self.refuse(mark, f"duplicate key {key!r} in this mapping")
        return key

    def _merge_sources(self, value: Any, mark: Any) -> list[dict[str, Any]]:
        if isinstance(value, dict):
            return [value]
        if isinstance(value, list) and all(isinstance(item, dict) for item in value):
            return value
        raise self.refuse(mark, "'<<' merges a mapping or a list of mappings")

    def _scalar_value(self, event: ScalarEvent) -> tuple[Any, bool]:
        """The value of a scalar as ``yaml.safe_load`` reads it, and whether it is '<<'."""
        value = event.value
        tag = event.tag
        if tag is None or tag == "!":
            if not event.implicit[0]:
                return value, False  # quoted, or '!': a string
            tag = _resolve(value)
            if tag is None:
                return value, False
            if tag == _MERGE_TAG:
                return value, True
            if tag == _TIMESTAMP:
                reason = f"{value!r} reads as a date; quote it (job files hold no dates)"
                raise self.refuse(event.start_mark, reason)
            if tag == _VALUE:
                return value, False  # '=', which safe_load cannot read at all
        elif tag not in _SCALAR_TAGS:
            raise self.refuse(event.start_mark, _tag_refusal(tag))
        if tag == _INT and value.isdecimal() and (value[0] != "0" or value == "0"):
            return int(value), False  # the usual integer, 10x faster than PyYAML's way
        try:
            construct = SafeConstructor.yaml_constructors[tag]
            return construct(_NUMBERS, ScalarNode(tag, value)), False
        except (ValueError, KeyError, IndexError, yaml.YAMLError):
            reason = f"{value!r} is not a valid !!{tag.removeprefix(_TAG)}"
            raise self.refuse(event.start_mark, reason) from None


# YAML 1.1's booleans that YAML 1.2 reads as words: as a key, a job file means the word.
_YAML11_WORDS = ("on", "off", "yes", "no", "y", "n")


def _ignore(event: Any) -> None:
    pass


def _resolve(value: str) -> str | None:
    """The implicit tag of a plain scalar (``SafeLoader``'s rules); None for a string."""
    for tag, regexp in _IMPLICIT.get(value[:1], ()):
        if regexp.match(value):
            return None if tag == _STR else tag
    return None


def _merged(sources: list[dict[str, Any]], own: dict[str, Any]) -> dict[str, Any]:
    """PyYAML's merge: keys of earlier sources win over later ones, own keys over all."""
    merged: dict[str, Any] = {}
    for source in reversed(sources):
        merged.update(source)
    merged.update(own)
    return merged


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "a mapping"
    kind = "a boolean" if isinstance(value, bool) else "a number"
    return f"{kind} ({value!r})"


def _tag_refusal(tag: str) -> str:
    shown = "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag
    return f"tag {shown} is not allowed: job files hold JSON's types (no dates, sets, binary)"
