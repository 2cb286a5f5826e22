"""The line format the ACL and revocation files share, and the error that names the bad line.

One rule per line, words separated by spaces, a word with spaces in
double or single quotes (shell-like, :func:`shlex.split`); a line whose
first non-blank character is ``#`` is a comment, as is a blank line (a
``#`` elsewhere is part of a word, so patterns may hold one).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator

__all__ = ["AuthFileError", "rules"]


class AuthFileError(ValueError):
    """A file the operator wrote does not parse: ``str()`` is ``FILE:LINE: what is wrong``."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}")
        self.source = source
        self.line = line
        self.message = message


def rules(text: str, source: str) -> Iterator[tuple[int, list[str]]]:
    """Each rule's line number (from 1) and words; AuthFileError for an unclosed quote."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            words = shlex.split(stripped)
        except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
            raise AuthFileError(source, number, str(exc).lower()) from None
        yield number, words
