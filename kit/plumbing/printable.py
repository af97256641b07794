"""The one rule for text kit shows on a terminal that may quote what came from outside (a manifest's keys, a bundle's
environment, a server's output): control characters are shown escaped, never sent.

A terminal acts on them: ``ESC ] 0 ;`` sets the window title, OSC 52 writes the clipboard on some terminals, OSC 8
makes links, ``CR`` and cursor moves overwrite what was printed (hiding a line of an error), and Unicode's bidi
overrides reorder it. click strips colour sequences only when the output is no terminal, and never these. Newline
and tab pass; everything else of Unicode's category Cc, and the bidi controls, is written as ``\\xNN`` / ``\\uNNNN``.
"""

from __future__ import annotations

import re

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")


def _escaped(m: re.Match[str]) -> str:
    code = ord(m.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab escaped (``\\x1b``, ``\\u202e``)."""
    return _UNPRINTABLE.sub(_escaped, text)
