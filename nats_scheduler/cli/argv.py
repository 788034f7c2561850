"""Option values that start with ``-``: ``hold DEP --until -5m`` reaches the command.

argparse reads a word starting with ``-`` as the next option unless it looks like a negative
number, so ``--until -5m`` (or ``--reason "-- see ticket"``) failed with argparse's "expected
one argument" before the command could say what is wrong with the value. Before parsing,
such a word after an option that takes exactly one value is joined to it
(``--until=-5m``), unless it is itself an option of the command: the command then judges
the value in its own words (``--until -5m is in the past: ...``) with its own exit code.
An option given no value at all, or one its type cannot read, is told so in the same words
(:class:`Parser`).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..command_line import EXIT_INVALID

_NO_VALUE = re.compile(r"^argument (?P<option>[^:]+): expected one argument$")
_BAD_VALUE = re.compile(r"^argument (?P<option>[^:]+): invalid (?P<kind>\w+) value: (?P<value>.*)$")
_KINDS = {"int": "a whole number", "float": "a number",
          "instant": "an instant in ISO 8601 (2026-12-05T14:00:00Z, or now)"}


class Parser(argparse.ArgumentParser):
    """argparse with the command line's words for an option left without its value."""

    def error(self, message: str) -> NoReturn:
        missing = _NO_VALUE.match(message)
        bad = _BAD_VALUE.match(message)
        if missing:
            option = missing.group("option").split("/")[-1]
            message = f"{option} needs a value (nats-scheduler {self.prog.split()[-1]} --help)"
        elif bad:
            option = bad.group("option").split("/")[-1]
            kind = _KINDS.get(bad.group("kind"), f"a valid {bad.group('kind')}")
            message = f"{option} {bad.group('value').strip(chr(39))} is not {kind}"
        elif message.startswith("argument "):  # a type's own words: --page: a page holds ...
            message = message.removeprefix("argument ")
        self.print_usage(sys.stderr)
        self.exit(EXIT_INVALID, f"error: {message}\n")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def join_dash_values(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """``argv`` with every ``--option VALUE`` whose VALUE starts with ``-`` written
    ``--option=VALUE``, for the options of the command named that take one value."""
    words = list(argv)
    commands = _subcommands(parser)
    at = next((i for i, word in enumerate(words) if word in commands), None)
    if at is None:
        return words
    options = commands[words[at]]._option_string_actions
    joined = words[:at + 1]
    rest = iter(words[at + 1:])
    for word in rest:
        if word == "--":
            joined += [word, *rest]
            break
        action = options.get(word)
        if word.startswith("--") and action is not None and action.nargs is None:
            value = next(rest, None)
            if value is None:
                joined.append(word)
                break
            if value.startswith("-") and not _is_option(value, options):
                joined.append(f"{word}={value}")
                continue
            joined += [word, value]
            continue
        joined.append(word)
    return joined


def _is_option(word: str, options: dict[str, argparse.Action]) -> bool:
    """Whether ``word`` names an option of the command (``--json``, ``--url=...``)."""
    return word.split("=", 1)[0] in options
