"""What the commands' output shares (``ablate.terminal``): a table never truncated in a pipe, a
refusal's lines and exit status, a signal's one line, the removals' question, a bug's one line."""

from __future__ import annotations

import io
import signal

import pytest
from rich.console import Console
from rich.markup import escape

from ablate import terminal
from ablate.terminal import (
    Refused,
    Said,
    Stopped,
    asking,
    internal_error,
    one_line,
    plugin_traceback,
    store_refused,
    table,
)


def piped() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return terminal.PipeConsole(file=buffer), buffer


def test_a_piped_console_is_as_wide_as_its_content():
    console, buffer = piped()
    assert console.size.width == terminal.PIPE_WIDTH
    console.print("x" * 300)
    assert buffer.getvalue() == "x" * 300 + "\n"


def test_a_piped_table_is_plain_aligned_columns_never_truncated():
    console, buffer = piped()
    long = "parameterisation=complex_diagonal, normalisation=gamma"
    table(console, "studies", ["study", "done"], [[long, "12"], ["b", "3"]], {"done"})
    assert buffer.getvalue().splitlines() == ["studies", f"study{' ' * (len(long) - 5)}  done", f"{long}    12",
                                              f"b{' ' * (len(long) - 1)}     3"]


def test_a_refusal_prints_its_lines_as_errors_with_its_exit_status():
    console, buffer = piped()
    refused = Refused([escape("first [x]"), "second"], 1)  # rich markup: the caller escapes what it quotes
    refused.print(console)
    assert refused.code == 1 and buffer.getvalue() == "error first [x]\nerror second\n"
    console, buffer = piped()
    Refused("nothing removed", 1, marked=False).print(console)
    assert buffer.getvalue() == "nothing removed\n"
    assert Refused("bad input").code == 2


def test_said_prints_its_lines_as_they_are():
    console, buffer = piped()
    Said(["removed s: 1 trial [red]", "kept 0"]).print(console)
    assert buffer.getvalue() == "removed s: 1 trial [red]\nkept 0\n"


def test_a_stopped_command_says_what_was_requeued_and_exits_128_plus_the_signal():
    console, buffer = piped()
    stopped = Stopped(signal.SIGTERM, ["a · seed 0", "b · seed 1"], "worker interrupted")
    stopped.print(console)
    assert stopped.code == 128 + signal.SIGTERM
    assert buffer.getvalue() == ("worker interrupted (SIGTERM): re-queued 2 running items: a · seed 0, b · seed 1; "
                                 "run the same command to resume\n")
    console, buffer = piped()
    Stopped(signal.SIGINT, []).print(console)
    assert buffer.getvalue() == "interrupted (SIGINT): no running item to re-queue; run the same command to resume\n"


def test_a_store_error_is_one_line_without_its_password():
    refused = store_refused(RuntimeError("cannot reach postgresql://u:secret@h/db [x]"))
    assert refused.code == 1 and refused.lines == [r"cannot reach postgresql://u:***@h/db \[x]"]


def test_a_removal_asks_unless_yes_and_refuses_without_a_terminal_or_a_yes(monkeypatch):
    asked: list[str] = []

    def answer(value: bool):
        return lambda question: asked.append(question) or value

    asking(True, answer(False))("remove?")
    assert asked == []
    monkeypatch.setattr("sys.stdin", io.StringIO())
    with pytest.raises(Refused) as no_terminal:
        asking(False, answer(True))("remove?")
    assert no_terminal.value.code == 1 and "pass --yes" in no_terminal.value.lines[0] and asked == []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    asking(False, answer(True))("remove?")
    with pytest.raises(Refused) as declined:
        asking(False, answer(False))("remove again?")
    assert asked == ["remove?", "remove again?"]
    assert declined.value.lines == ["nothing removed"] and not declined.value.marked and declined.value.code == 1


def test_a_bug_is_one_line_unless_the_traceback_is_asked_for(monkeypatch):
    monkeypatch.delenv("ABLATE_TRACEBACK", raising=False)
    console, buffer = piped()
    assert internal_error(console, ValueError("bad postgresql://u:pw@h/db\nsecond line")) == 1
    # the message's later lines (a template's searched paths) are joined, not dropped
    assert buffer.getvalue() == ("error (internal) ValueError: bad postgresql://u:***@h/db; second line; "
                                 "ABLATE_TRACEBACK=1 shows where\n")
    monkeypatch.setenv("ABLATE_TRACEBACK", "1")
    console, buffer = piped()
    try:
        raise KeyError("k")
    except KeyError as exc:
        internal_error(console, exc)
    assert "Traceback" in buffer.getvalue() and buffer.getvalue().endswith("ABLATE_TRACEBACK=1 shows where\n")


def test_one_line_joins_a_messages_lines_and_caps_its_length():
    assert one_line("No template sub-directory with name 'basic' found in the following paths:\n\t/a/share\n\t/b\n") \
        == "No template sub-directory with name 'basic' found in the following paths:; /a/share; /b"
    assert one_line("x" * 50, limit=10) == "x" * 9 + "…"


def test_a_plugins_traceback_is_printed_only_when_asked(monkeypatch, capsys):
    try:
        raise KeyError("no_such_column")
    except KeyError as exc:
        failure = exc
    monkeypatch.delenv("ABLATE_TRACEBACK", raising=False)
    line = failure.__traceback__.tb_lineno
    assert plugin_traceback(failure, "report section 's'") == (
        f"; at tests/test_terminal.py:{line} in test_a_plugins_traceback_is_printed_only_when_asked; "
        "ABLATE_TRACEBACK=1 shows its traceback")
    assert plugin_traceback(None, "report section 's'") == ""  # a promise broken without an exception
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("ABLATE_TRACEBACK", "1")
    assert plugin_traceback(failure, "report section 's'") == ""
    shown = capsys.readouterr().err
    assert shown.startswith("traceback of report section 's':\nTraceback (most recent call last):")
    assert "raise KeyError(\"no_such_column\")" in shown and shown.endswith("KeyError: 'no_such_column'\n")


def test_a_database_failing_under_optuna_is_said_as_the_databases_fault_not_a_bug(tmp_path):
    import sqlite3

    import optuna
    from sqlalchemy.exc import DatabaseError

    driver = sqlite3.DatabaseError("database disk image is malformed")
    try:
        try:
            raise DatabaseError("SELECT 1", {}, driver) from driver
        except DatabaseError as exc:
            raise optuna.exceptions.StorageInternalError("An exception is raised during the commit. This typically "
                                                          "happens due to invalid data in the commit") from exc
    except optuna.exceptions.StorageInternalError as exc:
        console, buffer = piped()
        assert internal_error(console, exc) == 1
    assert buffer.getvalue() == ("error a store's database failed: database disk image is malformed (DatabaseError); "
                                 "ABLATE_TRACEBACK=1 shows where\n")


def test_a_refusal_echoes_values_as_given_and_long_words_shortened():
    console, buffer = piped()
    value = "x" * 100_000
    Refused(["'a:b:c' is not one of: xi", f"no study named '{escape(value)}' [bold]in[/bold] s"]).print(console)
    first, second = buffer.getvalue().splitlines()
    assert first == "error 'a:b:c' is not one of: xi"  # ':b:' is not an emoji
    assert second == f"error no study named '{'x' * 99}… (100,002 characters) …{'x' * 19}' in s"
    # The console every command prints on turns no ':name:' into an emoji either.
    console, buffer = piped()
    console.print("a:b:c :smile:", highlight=False)
    assert buffer.getvalue() == "a:b:c :smile:\n"


def test_where_a_plugin_raised_is_its_own_line_not_a_librarys(tmp_path, monkeypatch):
    # a researcher's bug is in their file: torch's or ablate's frames below it are not the answer
    (tmp_path / "my_raising_plugin.py").write_text(
        "import torch\n\n\ndef build():\n    return torch.nn.Linear(4, 2)(torch.zeros(3))\n")
    (tmp_path / "my_syntax_plugin.py").write_text("class Broken(object)\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    try:
        importlib.import_module("my_raising_plugin").build()
    except RuntimeError as exc:
        assert terminal.raised_at(exc) == f"{tmp_path / 'my_raising_plugin.py'}:5 in build"
    try:
        importlib.import_module("my_syntax_plugin")
    except SyntaxError as exc:
        assert terminal.raised_at(exc) == f"{tmp_path / 'my_syntax_plugin.py'}:1"
    import json

    try:
        json.loads("{")
    except ValueError as exc:  # raised in the standard library's frames, called from this line
        assert terminal.raised_at(exc).startswith("tests/test_terminal.py:")
    assert terminal.raised_at(ValueError("never raised")) == ""


def test_a_count_says_its_noun_in_the_number_it_has() -> None:
    assert [terminal.count(n, "item") for n in (0, 1, 2)] == ["0 items", "1 item", "2 items"]
    assert terminal.count(3, "analysis", "analyses") == "3 analyses" and terminal.count(1, "analysis", "analyses") == "1 analysis"
