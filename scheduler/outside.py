"""Text from outside: what endpoints, tasks, gates and files say, made safe to keep.

Whatever cronchain records that it did not write itself (a task's exception, a response
body, a gate's answer, a heartbeat's note, a worker's name) crosses :func:`storable`
before it is stored, and the outcome of a run crosses it as a whole (``Outcome``):

- PostgreSQL refuses NUL in text and JSON, and neither PostgreSQL nor SQLite takes a
  lone surrogate (what ``surrogateescape`` leaves in a Python string). Each is replaced
  with U+FFFD, and a note at the end of the text says how many were: the record says
  that it is not quite what was sent. Nothing else is changed.
- Lengths are bounded where the caller says (:func:`bounded` keeps the start and the
  end of a long text, and says how much was cut).

Stored text is data: escaping it for where it goes next (Slack's markup, a mail header,
HTML, a log line: :func:`one_line`) is the job of whatever sends it there. A value a
user declares (a job file, a pause reason) is refused instead (:func:`unstorable`), so
that what is stored is what was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, overload

REPLACEMENT = "\ufffd"
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_NOTE = " [cronchain replaced {} character(s) it cannot store with U+FFFD]"
_CUT = "\n[... {} characters cut ...]\n"
UNSTORABLE_WHY = "holds a character that cannot be stored (NUL, or a lone surrogate)"
# C0 and C1 controls, and the two characters Unicode ends a line with.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def storable(text: str) -> str:
    """``text`` with each NUL and lone surrogate replaced, and a note if any was."""
    if text.isascii() and "\x00" not in text:  # almost always: no copy, no scan by re
        return text
    replaced, count = _UNSTORABLE.subn(REPLACEMENT, text)
    return replaced + _NOTE.format(count) if count else text


def bounded(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters: past that the middle is cut and a marker
    says how much. The start says what failed, the end where (the last frames of a
    traceback, the end of a response, the note :func:`storable` added)."""
    if len(text) <= limit:
        return text
    keep = limit - len(_CUT.format(len(text)))  # the longest marker this text can need
    head = keep // 2
    tail = keep - head
    return text[:head] + _CUT.format(len(text) - keep) + text[-tail:]


@overload
def kept(text: str, limit: int) -> str: ...
@overload
def kept(text: None, limit: int) -> None: ...
def kept(text: str | None, limit: int) -> str | None:
    """``text`` as it is recorded: storable, then bounded."""
    return None if text is None else bounded(storable(text), limit)


def described(err: object) -> str:
    """An exception as ``Type: message``, however its ``__str__`` behaves: one that
    raises, or returns something that is not a string, is named by its type alone."""
    name = type(err).__name__
    try:
        message = str(err)
    except Exception as failed:
        return f"{name} (its message could not be read: {type(failed).__name__})"
    return f"{name}: {message}" if message else name


def shown(value: Any, limit: int) -> str:
    """``repr(value)`` in at most ``limit`` characters, or why there is none."""
    try:
        text = repr(value)
    except Exception as failed:
        return f"{type(value).__name__} (its repr failed: {type(failed).__name__})"
    return text[:limit]


def one_line(text: str) -> str:
    """``text`` for a log line: control characters (CR, LF, ESC, NUL ...) written as
    escapes, so that a text from outside can neither start a forged line nor drive a
    terminal."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def shown_on_a_terminal(text: str) -> str:
    """``text`` for a terminal, lines kept: control characters but LF and tab written
    as escapes (an ESC from outside would drive the terminal that shows it)."""
    return _CONTROL_BUT_LINES.sub(lambda m: repr(m.group())[1:-1], text)


def unstorable(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The path of the first string in ``value`` (mappings, lists, their keys too) that
    holds a character no database stores (:data:`UNSTORABLE_WHY`), or None: for
    refusing a declared value."""
    if isinstance(value, str):
        return path if _UNSTORABLE.search(value) else None
    if isinstance(value, Mapping):
        for key, item in value.items():
            plain = isinstance(key, str) and re.fullmatch(r"[\w-]+", key)
            where = (*path, key if plain else repr(key))
            if isinstance(key, str) and _UNSTORABLE.search(key):
                return where
            found = unstorable(item, where)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for item in value:
            found = unstorable(item, path)
            if found is not None:
                return found
    return None
