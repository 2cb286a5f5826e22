"""The repository's names, as the docs may cite them: an ``ast`` index of its Python, and imports."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Where the repository's own Python lives (what the ast scan reads).
CODE_DIRS = ("aqueduct", "tests", "bench", "demo", "interop", "examples")
#: The checker and its tests: their strings hold planted false names, which must not count as code.
NOT_SCANNED = ("tests/doc_references/", "tests/unit/test_doc_references.py")
#: Other folders of the repository whose files docs cite.
OTHER_DIRS = ("docs", "certs")


@dataclass
class Signature:
    """What a call may pass: positional parameters (``self`` dropped) and keywords."""

    positional: list[str]
    keywords: set[str]
    varargs: bool
    varkw: bool

    def fits(self, args: list[str], loose: bool) -> bool:
        """Whether the doc's arguments fit (``loose``: the doc left some out, ``...``)."""
        keywords = [a.split("=")[0].strip() for a in args if re.match(r"^\w+\s*=", a)]
        positional = [a for a in args if not re.match(r"^\w+\s*=", a)]
        if not self.varkw and any(k not in self.keywords for k in keywords):
            return False
        return self.varargs or loose or len(positional) <= len(self.positional)


@dataclass
class ClassInfo:
    module: str
    bases: list[str]
    members: set[str] = field(default_factory=set)
    methods: dict[str, Signature] = field(default_factory=dict)


@dataclass
class CodeIndex:
    """Names defined by the repository's Python, by an ``ast`` scan (nothing is imported)."""

    classes: dict[str, list[ClassInfo]] = field(default_factory=dict)
    functions: dict[str, list[Signature]] = field(default_factory=dict)
    #: module -> the names it defines itself (not those it imports)
    defined_in: dict[str, set[str]] = field(default_factory=dict)
    #: identifiers and the words of string literals
    words: set[str] = field(default_factory=set)
    #: module -> the option strings of its ``add_argument`` calls
    options: dict[str, set[str]] = field(default_factory=dict)
    #: repo-relative paths of files and directories
    files: set[str] = field(default_factory=set)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> Signature:
    a = fn.args
    positional = [x.arg for x in a.posonlyargs + a.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    if method and positional and not static:
        positional = positional[1:]
    keywords = set(positional) | {x.arg for x in a.kwonlyargs}
    return Signature(positional, keywords, a.vararg is not None, a.kwarg is not None)


def _targets(stmt: ast.stmt) -> Iterator[str]:
    if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    yield n.id
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        yield stmt.target.id


def _is_dataclass_like(node: ast.ClassDef) -> bool:
    names = {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}
    names |= {ast.unparse(b).split(".")[-1] for b in node.bases}
    return bool(names & {"dataclass", "NamedTuple", "TypedDict"})


def _scan_class(node: ast.ClassDef, module: str) -> ClassInfo:
    info = ClassInfo(module, [ast.unparse(b).split(".")[-1] for b in node.bases])
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            info.members.add(item.name)
            info.methods[item.name] = _signature(item, method=True)
            for sub in ast.walk(item):  # self.x = ... in any method
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store):
                    if isinstance(sub.value, ast.Name) and sub.value.id == "self":
                        info.members.add(sub.attr)
        elif isinstance(item, ast.ClassDef):
            info.members.add(item.name)
        else:
            info.members.update(_targets(item))
    if "__init__" not in info.methods and _is_dataclass_like(node):
        fields = [t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)]
        info.methods["__init__"] = Signature(fields, set(fields), False, False)
    return info


def _scan_file(path: Path, index: CodeIndex) -> None:
    module = module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    own = index.defined_in.setdefault(module, set())
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(stmt.name)
        own.update(_targets(stmt))
    options = index.options.setdefault(module, set())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            index.classes.setdefault(node.name, []).append(_scan_class(node, module))
            index.words.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            index.functions.setdefault(node.name, []).append(_signature(node, method=False))
            index.words.add(node.name)
        elif isinstance(node, ast.Name):
            index.words.add(node.id)
        elif isinstance(node, ast.Attribute):
            index.words.add(node.attr)
        elif isinstance(node, ast.arg):
            index.words.add(node.arg)
        elif isinstance(node, ast.keyword) and node.arg:
            index.words.add(node.arg)
        elif isinstance(node, ast.alias):
            index.words.add((node.asname or node.name).split(".")[-1])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            index.words.update(re.findall(r"[A-Za-z_][\w-]*", node.value))
            index.words.update(re.findall(r"\w+", node.value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    options.add(a.value)


@cache
def code_index() -> CodeIndex:
    index = CodeIndex()
    for top in CODE_DIRS:
        for path in sorted((REPO / top).rglob("*")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO).as_posix()
            index.files.add(rel)
            if path.suffix == ".py" and not rel.startswith(NOT_SCANNED):
                _scan_file(path, index)
    index.files.update(path.name for path in REPO.glob("*"))
    for top in OTHER_DIRS:
        index.files.update(path.relative_to(REPO).as_posix() for path in (REPO / top).rglob("*"))
    mutants = tomllib.loads((REPO / "tests/mutants/mutants.toml").read_text())
    index.words |= {m["id"] for m in mutants.get("mutant", [])}
    # The Makefile's variables (``TEST_WORKERS=4 make test``) are settings users type too.
    index.words |= set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", (REPO / "Makefile").read_text(), re.M))
    return index


def class_members(name: str, seen: frozenset[str] = frozenset()) -> set[str] | None:
    """Every member of the classes called ``name`` and of their bases that the code defines."""
    infos = code_index().classes.get(name)
    if infos is None:
        return None
    members: set[str] = set()
    for info in infos:
        members |= info.members
        for base in info.bases:
            if base not in seen:
                members |= class_members(base, seen | {name}) or set()
    return members


def class_methods(name: str, member: str, seen: frozenset[str] = frozenset()) -> list[Signature]:
    """The signatures of ``member`` in the classes called ``name``, else in their bases."""
    infos = code_index().classes.get(name, [])
    found = [info.methods[member] for info in infos if member in info.methods]
    if not found:
        for base in {b for info in infos for b in info.bases} - seen - {name}:
            found += class_methods(base, member, seen | {name})
    return found


def is_test_file(name: str) -> bool:
    """``test_disk_full``: a test module named by its file."""
    return any(p.endswith(f"/{name}.py") for p in code_index().files)


def defines(path: Path, name: str, prefix: bool) -> bool:
    """Whether the Python file ``path`` defines ``name`` (or, ``prefix``, a name starting so)."""
    if path.suffix != ".py" or not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(n.name == name or (prefix and n.name.startswith(name)) for n in ast.walk(tree) if isinstance(n, kinds))


# ---------------------------------------------------------------- imports


def find_spec(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def signature_of(obj: object) -> Signature | None:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    kinds = inspect.Parameter
    return Signature(
        [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)],
        {p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)},
        any(p.kind is kinds.VAR_POSITIONAL for p in params),
        any(p.kind is kinds.VAR_KEYWORD for p in params),
    )


@cache
def old_paths() -> frozenset[str]:
    """Import paths that moved: they work, with a warning, and the docs show the new path.

    ``OLD_PATHS`` of tests/unit/test_public_api.py, and every module that is
    only an :func:`aqueduct._moved.moved_module` shim.
    """
    tree = ast.parse((REPO / "tests/unit/test_public_api.py").read_text())
    [pairs] = [
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "OLD_PATHS"
    ]
    shims = {module_name(p) for p in (REPO / "aqueduct").rglob("*.py") if "moved_module(__name__" in p.read_text()}
    return frozenset({f"{m}.{n}" for m, n in pairs} | shims)


def resolve_import(dotted: str) -> tuple[object | None, str | None]:
    """Import the longest module prefix of ``dotted`` and ``getattr`` the rest: (object, missing part).

    A path that moved counts as missing: the docs show where things are.
    """
    parts = dotted.split(".")
    for i in range(1, len(parts) + 1):
        if ".".join(parts[:i]) in old_paths():
            return None, ".".join(parts[:i])
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for j, name in enumerate(parts[i:], start=i):
            try:
                obj = getattr(obj, name)
            except AttributeError:
                owner = getattr(obj, "__name__", None)
                members = class_members(owner) if inspect.isclass(obj) and owner else None
                if members is not None and name in members and j == len(parts) - 1:
                    return None, None  # an instance attribute the class sets
                return None, ".".join(parts[: j + 1])
        return obj, None
    return None, parts[0]


OLD = "is an old path (it moved)"


def why_missing(path: str) -> str:
    if path in old_paths():
        return f"{path} {OLD}: show the new one"
    return "does not import"
