"""The mutants of ``mutants.toml`` and where their code is now.

A mutant names a module (``file``), snippets of it (``find``) and the test
files that guard it (``tests``). Code moves, so before anything runs each
mutant is *located*: every snippet must occur exactly once in ``file``,
and every test path must exist. What does not hold is said exactly (which
file is missing, which snippet occurs how often where), because the
person who reads it is re-targeting the mutant after a refactoring, and
a mutant whose code moved to one other module says where to point it
(``--repoint`` rewrites the entry).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = Path(__file__).with_name("mutants.toml")
PACKAGE = "aqueduct"


@dataclass
class Mutant:
    """One deliberate break of a rule."""

    id: str
    file: str
    find: list[str]
    replace: list[str]
    tests: list[str]
    promise: str
    survives: str | None = None  # why this mutant is expected to survive (None: it must be killed)
    moved_to: str | None = None  # the one module holding every snippet, when ``file`` does not
    stale: list[str] = field(default_factory=list)  # why the entry no longer points at its code
    outcome: str = ""  # killed / survived / stale / error
    seconds: float = 0.0
    detail: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        """The module the mutant patches: where its snippets are."""
        return self.moved_to or self.file


def load(path: Path = MUTANTS) -> list[Mutant]:
    """The mutants of the data file; ``find``/``replace`` may each be a string or a list of equal length."""
    mutants = []
    for raw in tomllib.loads(path.read_text())["mutant"]:
        finds = [raw["find"]] if isinstance(raw["find"], str) else list(raw["find"])
        replaces = [raw["replace"]] if isinstance(raw["replace"], str) else list(raw["replace"])
        if len(finds) != len(replaces):
            raise SystemExit(f"mutant {raw['id']}: {len(finds)} find entries but {len(replaces)} replace")
        mutants.append(
            Mutant(raw["id"], raw["file"], finds, replaces, list(raw["tests"]), raw["promise"], raw.get("survives"))
        )
    ids = [m.id for m in mutants]
    if len(set(ids)) != len(ids):
        raise SystemExit("mutants.toml: mutant ids must be unique")
    return mutants


def shown(snippet: str) -> str:
    """A snippet as a report quotes it: its first line, cut short."""
    first = snippet.strip().splitlines()[0]
    more = "..." if len(first) > 70 or "\n" in snippet.strip() else ""
    return repr(first[:70] + more)


def locate(mutant: Mutant, root: Path = ROOT) -> Path | None:
    """The module to patch, or None with ``mutant.stale`` saying why; sets ``moved_to`` for a moved one.

    Every snippet must occur exactly once in ``file``. If not, the one
    module of the package holding each exactly once is taken (and the
    entry reported as moved); found nowhere or in several, the mutant is
    stale and each snippet that is not where it should be is named with
    where it is. Test paths that no longer exist make it stale too.
    """
    mutant.stale = [f"test file {t.split('::')[0]} does not exist" for t in mutant.tests
                    if not (root / t.split("::")[0]).exists()]  # fmt: skip
    named = root / mutant.file
    text = named.read_text() if named.is_file() else None
    if text is not None and all(text.count(s) == 1 for s in mutant.find):
        return None if mutant.stale else named
    modules = {p: p.read_text() for p in sorted((root / PACKAGE).rglob("*.py"))}
    holding = [p for p, body in modules.items() if all(body.count(s) == 1 for s in mutant.find)]
    if len(holding) == 1 and not mutant.stale:
        mutant.moved_to = str(holding[0].relative_to(root))
        return holding[0]
    if text is None:
        mutant.stale.append(f"{mutant.file} does not exist")
    for i, snippet in enumerate(mutant.find, 1):
        here = text.count(snippet) if text is not None else 0
        if here == 1:
            continue
        elsewhere = [f"{p.relative_to(root)} ({n}x)" for p, body in modules.items()
                     if p != named and (n := body.count(snippet))]  # fmt: skip
        where = f"in {', '.join(elsewhere)}" if elsewhere else f"nowhere in {PACKAGE}/"
        said = f"{here} times in {mutant.file}" if text is not None else "file missing"
        mutant.stale.append(f"snippet {i} {shown(snippet)}: {said}; {where}")
    if len(holding) > 1:
        mutant.stale.append(f"every snippet occurs once in each of {', '.join(str(p.relative_to(root)) for p in holding)}")
    return None


def problem(mutant: Mutant) -> str | None:
    """What is wrong with where the mutant points (before any test runs), or None."""
    if mutant.stale:
        return "stale: " + "; ".join(mutant.stale)
    if mutant.moved_to:
        return (f"moved: its code is in {mutant.moved_to}, not {mutant.file}: set file = \"{mutant.moved_to}\" "
                "(make mutate ARGS=--repoint does)")  # fmt: skip
    return None


def repoint(mutants: list[Mutant], path: Path = MUTANTS) -> list[str]:
    """Rewrite the ``file`` of each moved mutant in the data file; what was changed, one line each."""
    text = path.read_text()
    changed = []
    for m in mutants:
        if not m.moved_to or m.stale:
            continue
        entry = re.compile(rf'(id = "{re.escape(m.id)}"\n(?:(?!\[\[mutant\]\]).*\n)*?file = )"{re.escape(m.file)}"')
        text, n = entry.subn(rf'\g<1>"{m.moved_to}"', text, count=1)
        if n:
            changed.append(f"{m.id}: {m.file} -> {m.moved_to}")
    path.write_text(text)
    return changed
