"""``scheduler.outside``: text from outside made storable, bounded and escaped."""

from __future__ import annotations

from cronchain.scheduler.outside import (
    bounded,
    described,
    kept,
    one_line,
    shown,
    shown_on_a_terminal,
    storable,
    unstorable,
)

NOTE = " [cronchain replaced {} character(s) it cannot store with U+FFFD]"


def test_nul_and_lone_surrogates_are_replaced_and_counted():
    assert storable("a\x00b\ud800c\udfff") == "a\ufffdb\ufffdc\ufffd" + NOTE.format(3)
    assert storable("\x00") == "\ufffd" + NOTE.format(1)


def test_anything_else_is_kept_as_it_is():
    text = "plain ascii\r\n\t\x1b[31m"
    assert storable(text) is text  # no copy on the common path
    assert storable("é 😀 \ufffe <&>") == "é 😀 \ufffe <&>"


def test_a_long_text_keeps_its_start_its_end_and_the_note():
    text = storable("x" * 10_000 + "\x00")
    cut = bounded(text, 500)
    assert len(cut) <= 500 and cut.startswith("xxx") and cut.endswith(NOTE.format(1))
    assert "characters cut" in cut
    assert kept(None, 10) is None and kept("ab", 10) == "ab"


def test_an_exception_is_described_however_its_text_behaves():
    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    class NotText(Exception):
        def __str__(self):  # type: ignore[no-untyped-def]
            return 42

    assert described(ValueError("bad \x00")) == "ValueError: bad \x00"
    assert described(KeyError()) == "KeyError"
    assert described(Unreadable()) == "Unreadable (its message could not be read: RuntimeError)"
    assert described(NotText()) == "NotText (its message could not be read: TypeError)"


def test_a_value_is_shown_within_its_limit_or_named():
    class Bad:
        def __repr__(self) -> str:
            raise ValueError("no")

    assert shown("x" * 1000, 10) == "'xxxxxxxxx"
    assert shown(Bad(), 10) == "Bad (its repr failed: ValueError)"


def test_log_lines_and_terminals_get_control_characters_as_escapes():
    assert one_line("a\r\nforged line\x1b[2J\x00") == "a\\r\\nforged line\\x1b[2J\\x00"
    assert shown_on_a_terminal("a\nb\tc\x1b[31m\r") == "a\nb\tc\\x1b[31m\\r"
    assert one_line("csi\x9b2J ls\u2028ps\u2029") == "csi\\x9b2J ls\\u2028ps\\u2029"


def test_the_first_unstorable_value_is_found_by_its_path():
    spec = {"name": "a", "celery": {"kwargs": {"ok": [1, "x"], "note": "a\x00"}}}
    assert unstorable(spec) == ("celery", "kwargs", "note")
    assert unstorable({"http": {"headers": {"X\ud800": "v"}}}) == ("http", "headers", "'X\\ud800'")
    assert unstorable({"args": [1, {"k": ["\ud800"]}]}) == ("args", "k")
    assert unstorable({"a": "fine", "b": [1, 2.5, None, True]}) is None
