"""Command lines the docs show: the console scripts' real parsers, ``python -m``, ``make``."""

from __future__ import annotations

import argparse
import importlib
import re
import tomllib
from functools import cache

from tests.doc_references.code import CODE_DIRS, REPO, code_index, find_spec

#: The words a command line the docs show starts with.
COMMAND_WORDS = ("aqueduct-bridge", "aqueduct-produce", "aqueduct", "make", "python", "python3")
#: How the console scripts' modules name their parser builders.
PARSER_BUILDERS = ("parser", "_parser", "build_parser")
#: Every argparse parser takes these.
ALWAYS = {"-h", "--help"}


@cache
def console_parsers() -> dict[str, argparse.ArgumentParser]:
    """The console scripts' real parsers, by command name (``pyproject.toml`` names their modules)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    parsers = {}
    for command, target in scripts.items():
        module = importlib.import_module(target.split(":")[0])
        builder = next(getattr(module, n) for n in PARSER_BUILDERS if hasattr(module, n))
        parsers[command] = builder()
    return parsers


def _subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option_strings(p: argparse.ArgumentParser) -> set[str]:
    return {o for action in p._actions for o in action.option_strings}


@cache
def every_option() -> frozenset[str]:
    """Every option any command of the repository takes (for a lone ``--opt`` in prose)."""
    found: set[str] = set()

    def walk(p: argparse.ArgumentParser) -> None:
        found.update(_option_strings(p))
        for sub in _subcommands(p).values():
            walk(sub)

    for p in console_parsers().values():
        walk(p)
    for options in code_index().options.values():
        found |= options
    return frozenset(found)


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    return frozenset(re.findall(r"^([\w.-]+)\s*:(?!=)", text, re.MULTILINE))


def options_in(words: list[str]) -> list[str]:
    """The long options among ``words`` (``--cert/--key`` is two, ``--x=1`` is ``--x``)."""
    found = []
    for w in words:
        w = w.strip("[]()'\",")
        if w.startswith("--") and len(w) > 2:
            found += [o.split("=")[0] for o in w.split("/") if o.startswith("--")]
    return found


def check_command(words: list[str]) -> list[tuple[str, str]]:
    """(name, why) for each part of a command line that does not exist."""
    head, rest = words[0], words[1:]
    if head in ("python", "python3"):
        return _check_python_m(rest)
    if head == "make":
        return [(f"make {t}", "no such Makefile target") for t in rest[:1] if "=" not in t and t not in make_targets()]
    parser = console_parsers().get(head)
    if parser is None:
        return []
    prog = head
    for i, w in enumerate(rest):
        if w.endswith(":"):  # the command's own message quoted (``aqueduct-bridge serve: --pipeline ...``)
            return []
        subs = _subcommands(parser)
        if subs and re.fullmatch(r"[a-z][\w-]*", w) and not any(x.startswith("-") for x in rest[:i]):
            if w not in subs:
                return [(f"{prog} {w}", "no such subcommand")]
            parser, prog = subs[w], f"{prog} {w}"
    known = _option_strings(parser) | ALWAYS
    return [(f"{prog} {o}", "no such option") for o in options_in(rest) if o not in known]


def _check_python_m(rest: list[str]) -> list[tuple[str, str]]:
    if len(rest) < 2 or rest[0] != "-m":
        return []
    module = rest[1]
    rel = module.replace(".", "/")
    if not ((REPO / f"{rel}.py").exists() or (REPO / rel / "__main__.py").exists()):
        if module.split(".")[0] in CODE_DIRS or find_spec(module) is None:
            return [(f"python -m {module}", "no such module")]
        return []  # another package's: pyspark's source runner
    top = module.split(".")[0]
    known = {o for m, opts in code_index().options.items() if m == top or m.startswith(top + ".") for o in opts}
    return [(f"python -m {module} {o}", "no such option") for o in options_in(rest[2:]) if o not in known | ALWAYS]


def check_command_text(text: str) -> list[tuple[str, str]]:
    """Every command of a shell line (``a && b | c``), after its environment and prompt."""
    found = []
    for part in re.split(r"\s*(?:&&|\|\||\||;)\s*", text):
        words = part.split("#")[0].split()  # a comment ends it
        while words and (re.match(r"^\w+=", words[0]) or words[0] in ("$", "sudo", "exec")):
            words = words[1:]
        if words and words[0].endswith("/python"):
            words[0] = "python"  # .venv/bin/python
        if words and words[0] in COMMAND_WORDS:
            found += check_command(words)
    return found
