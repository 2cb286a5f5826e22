"""Markdown pages: what in them is code (spans, code blocks, links), each checked where it belongs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.doc_references.code import OLD, REPO, code_index, resolve_import, why_missing
from tests.doc_references.commands import (
    COMMAND_WORDS,
    check_command_text,
    every_option,
    options_in,
)
from tests.doc_references.names import REPO_SUFFIXES, check_name, check_path, check_test, not_ours

#: Docs checked: README.md and every Markdown page under docs/, except these.
EXEMPT = (
    # the history of the performance work: it names what was measured then, on purpose
    "docs/dev/performance-history.md",
    # copies of the upstream specs, compared byte for byte by test_vector_copies.py
    "docs/spec/",
)

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_IN_MODULE = re.compile(r"`(?P<name>[A-Za-z_]\w*)`(?: lives| is)? in `(?P<module>aqueduct(?:\.\w+)+)`")
_IMPORT = re.compile(r"^\s*(?:from\s+(?P<from>aqueduct[\w.]*)\s+import\s+(?P<names>[^#]+)|import\s+(?P<mod>aqueduct[\w.]*))")
_CALL = re.compile(r"(?<![\w.])((?:aqueduct\.)?[A-Za-z_][\w.]*)\(([^()]*)\)")
_SOURCE_OPTION = re.compile(r"\.option\(\s*\"(\w+)\"")
_TEST = re.compile(r"(test_\w+)(?:\.py)?(?:::(test_\w+(?:\.\.\.|…)?))?(?:\[.*\])?")
_SAYS_OLD = re.compile(r"deprecat|still work|was called|old path", re.IGNORECASE)
_SHELL = ("", "sh", "bash", "shell", "console", "text")


@dataclass(frozen=True)
class Missing:
    """A name a doc cites that the repository does not have."""

    doc: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.name} ({self.why})"


def check_text(text: str, doc: str) -> list[Missing]:
    """Every missing thing ``text`` (a Markdown page called ``doc``) cites."""
    found: list[Missing] = []
    in_block, lang = False, ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        i += 1
        fence = re.match(r"^\s*(```|~~~)\s*(\w*)", line)
        if fence:
            in_block, lang = (not in_block), fence[2]
            continue
        if in_block:
            while line.rstrip().endswith("\\") and i < len(lines):  # a command continued
                line = line.rstrip()[:-1] + " " + lines[i]
                i += 1
            found += [Missing(doc, number, n, w) for n, w in check_code_line(line, lang)]
            continue
        if line.startswith("    ") and line.split()[0] in COMMAND_WORDS:  # an indented code block
            found += [Missing(doc, number, n, w) for n, w in check_command_text(line.strip())]
            continue
        says_old = _SAYS_OLD.search(" ".join(lines[max(number - 2, 0) : number + 1]))  # with its neighbours
        for span in _SPAN.findall(line):
            found += [Missing(doc, number, n, w) for n, w in check_span(span) if not (says_old and OLD in w)]
        for target in _LINK.findall(line):
            found += [Missing(doc, number, n, w) for n, w in _check_link(target, doc)]
        for m in _IN_MODULE.finditer(line):
            if not lives_in(m["name"], m["module"]):
                found.append(Missing(doc, number, f"{m['module']}.{m['name']}", f"{m['name']} is not defined there"))
    return found


def lives_in(name: str, module: str) -> bool:
    """"`Mode` in `aqueduct.wire.modes`": a module must define it; a package may export it."""
    if name in code_index().defined_in.get(module, set()):
        return True
    is_package = (REPO / module.replace(".", "/") / "__init__.py").exists()
    return is_package and resolve_import(f"{module}.{name}")[1] is None


def check_span(span: str) -> list[tuple[str, str]]:
    """What is missing of one backticked span."""
    span = span.strip()
    words = span.split()
    if not words:
        return []
    if words[0] in ("from", "import") and len(words) > 1 and words[1].startswith("aqueduct"):
        return check_code_line(span, "python")
    if words[0] in COMMAND_WORDS and (len(words) > 1 or words[0] != "aqueduct"):
        if words[0] in ("python", "python3") and words[1:2] != ["-m"]:
            return []
        return check_command_text(span)
    if span.startswith("--"):
        return [(o, "no command takes this option") for o in options_in(words[:1]) if o not in every_option() and not not_ours(o)]
    test = _TEST.fullmatch(words[0])
    if test:
        return check_test(test[1], test[2])
    if "/" in words[0] or "::" in words[0] or words[0].endswith(REPO_SUFFIXES):
        return check_path(words[0].rstrip(",;:"))
    metric = re.fullmatch(r"(aqueduct_\w+)(?:\{\w+\})?(?: [<>=]+ \d+)?", span)  # aqueduct_x_total{consumer}
    if metric:
        return check_name(metric[1])
    keyword = re.fullmatch(r"(\w+)=\S*", span)  # max_queued=, retention_seconds=N
    if keyword and ("_" in keyword[1] or span.endswith("=")):
        return check_name(keyword[1])
    option = re.fullmatch(r'option\("(\w+)"(?:, .*)?\)', span)
    if option:
        return [] if option[1] in source_options() else [(span, "the aqueduct source has no such option")]
    if re.fullmatch(r"[a-z]+(?:-[a-z0-9]+){2,}", span):  # a mutant's or a test case's id (or a prefix + a name)
        words_known = code_index().words
        return [] if span in words_known or span.rsplit("-", 1)[0] in words_known else [(span, "not in the code")]
    return check_name(span)


def check_code_line(line: str, lang: str) -> list[tuple[str, str]]:
    """A line of a code block: a shell block's commands; a Python block's imports, calls and source options."""
    if lang in _SHELL:
        stripped = line.strip().removeprefix("$ ")
        head = stripped.split(" ")[0].split("/")[-1]
        return check_command_text(stripped) if head in COMMAND_WORDS or re.match(r"^\w+=\S+\s", stripped) else []
    if lang != "python":
        return []
    found: list[tuple[str, str]] = []
    m = _IMPORT.match(line)
    if m and m["from"]:
        for name in m["names"].strip("() \\").split(","):
            name = name.split(" as ")[0].strip()
            missing = resolve_import(f"{m['from']}.{name}")[1] if name and name != "*" else None
            if missing:
                found.append((f"from {m['from']} import {name}", why_missing(missing)))
    elif m and m["mod"]:
        missing = resolve_import(m["mod"])[1]
        if missing:
            found.append((f"import {m['mod']}", why_missing(missing)))
    for call in _CALL.finditer(line):  # SparkBridge(spark, log=...), aqueduct.connect(host, port, cafile=...)
        name = call[1]
        if name.startswith("aqueduct.") or (name[0].isupper() and name in code_index().classes):
            found += check_name(f"{name}({call[2]})")
    source = line.split('format("aqueduct")', 1)[1] if 'format("aqueduct")' in line else ""
    for option in _SOURCE_OPTION.findall(source):
        if option not in source_options():
            found.append((f'option("{option}")', "the aqueduct source has no such option"))
    return found


@cache
def source_options() -> frozenset[str]:
    from aqueduct.bridge.source import options

    return frozenset(options.OPTIONS) | frozenset(options.KAFKA_ALIASES) | frozenset(options.KAFKA_ONLY)


def _check_link(target: str, doc: str) -> list[tuple[str, str]]:
    path = target.split("#")[0]
    if "://" in target or target.startswith("mailto:") or not path:
        return []
    return [] if ((REPO / doc).parent / path).exists() else [(target, "the link leads nowhere")]


def docs_to_check() -> list[Path]:
    """README.md and every Markdown page under docs/, but the exempt ones."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [p for p in pages if not p.relative_to(REPO).as_posix().startswith(EXEMPT)]


def check_docs() -> list[Missing]:
    found: list[Missing] = []
    for page in docs_to_check():
        found += check_text(page.read_text(), page.relative_to(REPO).as_posix())
    return found
