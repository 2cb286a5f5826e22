"""``make mutate``: break each rule on purpose and check that a fast test notices.

Each mutant in ``mutants.toml`` is a textual patch (``find`` -> ``replace``)
of one module of a *temporary copy* of the tree; the fast (non-Spark)
tests chosen for it then run against that copy. A mutant is *killed* when
they fail, and *survives* when they pass. A surviving mutant either needs
a new test or an explanation (its ``survives`` entry, mirrored in
docs/testing.md); one that survives unexplained fails the run, as does one
that is killed although it is listed as surviving (the list is stale).

Mutants are keyed by a code snippet, not a line number: code that moves
within a file keeps its mutants. Before anything runs, every entry is
located (``tests/mutants/catalog.py``); one whose code or test files are
gone fails the run, naming exactly what is missing, and one whose code
moved to another module runs there but fails the run too, saying how to
re-point it (``--repoint`` rewrites the entries). ``--check`` does only
that, in a second, without running a test.

Hand-written mutants rather than a generator such as mutmut: each one
breaks a promise the project makes (the issue that introduced this lists
them), and each runs only the few tests that guard it, so the whole run
takes minutes on two cores instead of hours.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.mutants.catalog import ROOT, Mutant, load, locate, problem, repoint
from tests.mutants.listing import DOCS, markdown, write_docs

#: what a test run needs from the tree (the copy leaves out .git, .venv and build output)
COPIED = ("aqueduct", "tests", "demo", "bench", "interop", "examples", "certs", "pyproject.toml")
TIMEOUT = 600.0  # seconds per pytest run: only turns a hang into a failure


def copy_tree(src: Path, dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
    for name in COPIED:
        path = src / name
        if path.is_dir():
            shutil.copytree(path, dst / name, ignore=ignore)
        elif path.is_file():
            shutil.copy2(path, dst / name)


def pytest(tree: Path, tests: list[str], *, first_failure: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``tests`` against ``tree``'s own ``aqueduct`` (first on the path), quietly."""
    env = os.environ | {"PYTHONPATH": str(tree), "PYSPARK_PYTHON": sys.executable}
    command = [sys.executable, "-m", "pytest", "-q", "-rfs", *(["-x"] if first_failure else []), "-p", "no:cacheprovider",
               "-m", "not spark", *tests]  # fmt: skip
    try:
        return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(command, -1, str(exc.stdout or ""), f"timed out after {TIMEOUT} s")


def last_line(run: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {run.returncode}"


def failed_tests(run: subprocess.CompletedProcess[str]) -> list[str]:
    """The node ids pytest's summary names as failed."""
    return [line.split()[1] for line in run.stdout.splitlines() if line.startswith("FAILED ")]


def run_mutant(mutant: Mutant, tree: Path, *, every_test: bool = False) -> None:
    target = locate(mutant, tree)
    if target is None:
        mutant.outcome, mutant.detail = "stale", "; ".join(mutant.stale)
        return
    original = target.read_text()
    mutated = original
    for find, replace in zip(mutant.find, mutant.replace, strict=True):
        mutated = mutated.replace(find, replace)
    start = time.monotonic()
    try:
        target.write_text(mutated)
        run = pytest(tree, mutant.tests, first_failure=not every_test)
    finally:
        target.write_text(original)
    mutant.seconds = time.monotonic() - start
    mutant.detail = last_line(run)
    # pytest: 0 all passed, 1 some failed; anything else (collection error, no tests, timeout) is no verdict
    mutant.outcome = {0: "survived", 1: "killed"}.get(run.returncode, "error")
    if every_test:
        mutant.notes += [f"fails: {test}" for test in failed_tests(run)]


def verdict(mutant: Mutant) -> str | None:
    """What is wrong with this outcome, or None."""
    if where := problem(mutant):
        return where
    if mutant.outcome == "error":
        return f"error: {mutant.detail}"
    if mutant.outcome == "survived" and mutant.survives is None:
        return "survived, and no test or explanation covers it: add a test (or a `survives` reason)"
    if mutant.outcome == "killed" and mutant.survives is not None:
        return "killed, but listed as surviving: drop its `survives` entry (then make mutate ARGS=--write-docs)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make mutate", description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="run only these mutants (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of lines")
    parser.add_argument("--every-test", action="store_true",
                        help="run all of a mutant's tests, not up to the first failure, and name those that fail")
    parser.add_argument("--no-baseline", action="store_true", help="skip checking that the unmutated tree passes")
    parser.add_argument("--check", action="store_true",
                        help="only check that every entry points at its code and test files (no test runs)")
    parser.add_argument("--repoint", action="store_true",
                        help="rewrite the `file` of every mutant whose code moved to one other module, and exit")
    parser.add_argument("--list-markdown", action="store_true", help="print the mutant list docs/testing.md holds")
    parser.add_argument("--write-docs", action="store_true", help="rewrite that list in docs/testing.md")
    args = parser.parse_args(argv)

    mutants = load()
    if args.ids:
        unknown = set(args.ids) - {m.id for m in mutants}
        if unknown:
            parser.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.id in args.ids]
    if args.list:
        for m in mutants:
            print(f"{m.id:40} {m.file}: {m.promise}")
        return 0
    if args.list_markdown:
        print(markdown(mutants), end="")
        return 0
    if args.write_docs:
        changed = write_docs(load())
        print(f"{DOCS.relative_to(ROOT)}: mutant list {'rewritten' if changed else 'already current'}")
        return 0

    for m in mutants:
        locate(m)  # in the checkout, before anything runs: stale entries are named even if tests hang later
    if args.repoint:
        for line in repoint(mutants) or ["nothing moved"]:
            print(line)
        return 0
    if args.check:
        misplaced = {m.id: why for m in mutants if (why := problem(m))}
        for mid, why in misplaced.items():
            print(f"{mid}: {why}")
        print(f"{len(mutants) - len(misplaced)} of {len(mutants)} mutants point at their code")
        return 1 if misplaced else 0

    progress = sys.stderr if args.json else sys.stdout
    with tempfile.TemporaryDirectory(prefix="aqueduct-mutate-") as tmp:
        tree = Path(tmp)
        copy_tree(ROOT, tree)
        if not args.no_baseline:
            tests = sorted({t for m in mutants if not m.stale for t in m.tests})
            print(f"baseline: {len(tests)} test files on the unmutated tree ...", file=progress, flush=True)
            base = pytest(tree, tests)
            if base.returncode != 0:
                print(f"baseline fails, no verdict possible: {last_line(base)}\n{base.stdout[-3000:]}", file=sys.stderr)
                return 2
        for i, m in enumerate(mutants, 1):
            run_mutant(m, tree, every_test=args.every_test)
            print(f"[{i}/{len(mutants)}] {m.id}: {m.outcome} ({m.seconds:.0f} s) {m.detail}", file=progress, flush=True)
            for note in ([f"moved: its code is in {m.moved_to}"] if m.moved_to else []) + m.notes:
                print(f"    note: {note}", file=progress)
    problems = {m.id: why for m in mutants if (why := verdict(m)) is not None}
    if args.json:
        print(json.dumps({
            "mutants": [
                {"id": m.id, "file": m.target, "outcome": m.outcome, "seconds": round(m.seconds, 1),
                 "expected_survivor": m.survives is not None, "detail": m.detail, "notes": m.notes}
                for m in mutants
            ],
            "killed": sum(m.outcome == "killed" for m in mutants),
            "survived": sum(m.outcome == "survived" for m in mutants),
            "problems": problems,
            "ok": not problems,
        }, indent=2))  # fmt: skip
    else:
        killed = sum(m.outcome == "killed" for m in mutants)
        print(f"{killed} of {len(mutants)} mutants killed; {len(problems)} problem(s)")
        for mid, why in problems.items():
            print(f"  {mid}: {why}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
