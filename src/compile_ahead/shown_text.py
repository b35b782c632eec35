"""User text shown on a terminal or written into markdown: the characters that must not reach
either raw.

Control characters (Unicode category Cc: newline, carriage return, escape, ...) split a line or
start a terminal escape sequence; format characters (Cf: the bidi overrides and isolates
U+202A-U+202E and U+2066-U+2069, zero-width characters, ...) reorder or hide what is shown;
line and paragraph separators (Zl, Zp) split lines in some viewers. Names holding any of them are
refused where they are read (``hidden_character``), and ``shown`` escapes them wherever user
text is printed, as a second line of defence.
"""

from __future__ import annotations

import unicodedata

HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def hidden_character(text: str) -> str | None:
    """The first control, format or line-separator character of ``text`` as U+XXXX, or None."""
    return next((f"U+{ord(c):04X}" for c in text if _hidden(c)), None)


def shown(text: str) -> str:
    """``text`` with each such character written as an escape (``\\n``, ``\\x1b``, ``\\u202e``),
    so it prints as one line that says what it holds."""
    if not any(_hidden(c) for c in text):
        return text
    return "".join(repr(c)[1:-1] if _hidden(c) else c for c in text)
