"""The mutant list stays true: every entry points at its code, and docs/testing.md lists what the data file holds.

``make mutate`` runs the mutants (CI does, after ``make test``); these
checks take a second, so a refactoring that moves a mutant's code fails
here too, in the inner loop, with the words the runner would print.
"""

from __future__ import annotations

from pathlib import Path

from tests.mutants.catalog import Mutant, load, locate, problem, repoint
from tests.mutants.listing import DOCS, docs_block, markdown


def test_every_mutant_points_at_its_code_and_tests() -> None:
    mutants = load()
    for m in mutants:
        locate(m)
    assert {m.id: problem(m) for m in mutants if problem(m)} == {}


def test_docs_list_the_mutants_of_the_data_file() -> None:
    assert docs_block(DOCS.read_text()) == markdown(load()), "run: make mutate ARGS=--write-docs"


def a_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def mutant(find: list[str], tests: tuple[str, ...] = ("tests/test_rule.py",)) -> Mutant:
    return Mutant("m", "aqueduct/rule.py", find, ["pass"] * len(find), list(tests), "a promise")


def test_a_stale_entry_names_what_is_missing_and_where_its_text_is(tmp_path: Path) -> None:
    root = a_tree(tmp_path, {"aqueduct/rule.py": "a = 1\na = 1\n", "aqueduct/other.py": "b = 2\na = 1\n"})
    m = mutant(["a = 1", "c = 3"], tests=("tests/test_rule.py::test_one",))
    assert locate(m, root) is None
    assert m.stale == [
        "test file tests/test_rule.py does not exist",
        "snippet 1 'a = 1': 2 times in aqueduct/rule.py; in aqueduct/other.py (1x)",
        "snippet 2 'c = 3': 0 times in aqueduct/rule.py; nowhere in aqueduct/",
    ]
    assert problem(m).startswith("stale: test file tests/test_rule.py does not exist; snippet 1")

    gone = mutant(["a = 1"])
    assert locate(gone, a_tree(tmp_path / "gone", {"tests/test_rule.py": "", "aqueduct/x.py": ""})) is None
    assert gone.stale == ["aqueduct/rule.py does not exist", "snippet 1 'a = 1': file missing; nowhere in aqueduct/"]


def test_a_moved_entry_runs_where_its_code_is_and_is_repointed(tmp_path: Path) -> None:
    root = a_tree(tmp_path, {"aqueduct/rooms/rule.py": "a = 1\n", "tests/test_rule.py": ""})
    m = mutant(["a = 1"])
    assert locate(m, root) == root / "aqueduct/rooms/rule.py"
    assert problem(m) == (
        'moved: its code is in aqueduct/rooms/rule.py, not aqueduct/rule.py: set file = "aqueduct/rooms/rule.py" '
        "(make mutate ARGS=--repoint does)"
    )
    data = tmp_path / "mutants.toml"
    data.write_text('[[mutant]]\nid = "m"\npromise = "p"\nfile = "aqueduct/rule.py"\n\n'
                    '[[mutant]]\nid = "n"\npromise = "q"\nfile = "aqueduct/rule.py"\n')  # fmt: skip
    assert repoint([m], data) == ["m: aqueduct/rule.py -> aqueduct/rooms/rule.py"]
    assert data.read_text().count('file = "aqueduct/rooms/rule.py"') == 1  # only m's entry
