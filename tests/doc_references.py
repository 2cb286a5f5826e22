"""Every name a doc cites must exist: the checker behind tests/unit/test_doc_references.py.

Docs are a reference, and a reference that names a module, class, method,
option or command that is gone sends a reader nowhere. This module reads
Markdown, picks out what looks like code (backticked spans, code blocks,
links) and resolves each against the repository as it is:

- ``aqueduct.x.y`` by import and ``getattr`` (then the code's own classes);
- ``Class``, ``Class.member``, ``Class.method(a, b=...)`` against every class
  and function defined in the repository's Python (an ``ast`` scan), the
  call's arguments against the definition's parameters;
- ``path/to/file.py``, ``module.py``, ``tests/x.py::test_name`` against files;
- ``aqueduct-bridge serve --opt``, ``aqueduct-produce --opt``, ``aqueduct
  certs``, a lone ``--opt`` against the console scripts' real argparse
  parsers; ``python -m mod --opt`` against the module and its
  ``add_argument`` calls; ``make target`` against the Makefile;
- a code-like word (``snake_case``, ``camelCase``) against the identifiers
  and string literals of the code (the source's options, metric names,
  benchmark names live there);
- "`Name` in `aqueduct.mod`" against what ``mod`` itself defines.

Plain words in backticks (``log``, ``rate``, frame names in capitals) are
prose and pass. What is deliberately not this project's code (Spark's,
Kafka's, the operating system's names) is in :data:`NOT_OURS`, each with why.
"""

from __future__ import annotations

import argparse
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

REPO = Path(__file__).resolve().parents[1]

#: Where the repository's own Python lives (what the ast scan reads).
CODE_DIRS = ("aqueduct", "tests", "bench", "demo", "interop", "examples")
#: The checker and its tests: their strings hold planted false names, which must not count as code.
NOT_SCANNED = {"tests/doc_references.py", "tests/unit/test_doc_references.py"}
#: Other folders of the repository whose files docs cite.
OTHER_DIRS = ("docs", "certs")

#: Docs checked: every Markdown page under docs/ and the README, except these.
EXEMPT_DOCS = {
    # the history of the performance work: it names what was measured then, on purpose
    "docs/dev/performance-history.md",
}
EXEMPT_DIRS = {
    # copies of the upstream specs, compared byte for byte by test_vector_copies.py
    "docs/spec",
}

#: Names cited in the docs that are deliberately not this repository's code.
#: A prefix ending in "." or "*" covers everything under it.
NOT_OURS = {
    # Spark: the query API, its data source API, its configuration keys and JVM classes
    "StreamingQuery", "StreamingQueryListener", "DataStreamWriter", "ReportsSourceMetrics",
    "ReadMaxRows", "Trigger.AvailableNow", "PythonMicroBatchStreamBase", "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY",
    "org.apache.spark.*", "spark.", "query.", "q.", "walCommit", "triggerExecution", "txnVersion",
    "txnAppId", "processingTime", "awaitTermination", "foreachBatch", "writeStream", "readStream",
    "isActive", "lastProgress", "toString", "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy",
    "startingTimestamp", "endingTimestamp", "endingOffsetsByTimestamp", "from_json", "python_streaming_source_runner",
    "_spark_metadata", "spark_e2e",
    # aioquic's classes, whose internals the runtime uses (architecture.md)
    "QuicConnectionProtocol.", "QuicServer.",
    "_write_application",  # aioquic's, in a profile (performance.md)
    # prometheus_client's own process metrics
    "process_cpu_seconds_total", "process_open_fds", "process_resident_memory_bytes",
    # other tools' options: spark-submit's, docker's, pytest's, py-spy's
    "--driver-memory", "--deploy-mode", "--master", "--stop-timeout", "--basetemp", "--subprocesses",
    # Kafka's source options, named when the docs compare
    "kafka.", "kafkaConsumer.", "groupIdPrefix", "fetchOffset.", "includeHeaders",
    # Wallaroo's connector API, which the v3 session speaks to
    "AtLeastOnceSourceConnector",
    # Databricks, Linux, Python's own
    "dbutils.",
    "SPARK_CONF_DIR",
    "SPARK_DAEMON_MEMORY", "net.core.", "sched_setaffinity", "loop.", "asynchat", "epoll",
}

#: Backticked names users hold in a variable: ``bridge.stream()``, ``conn.stats()``.
#: What follows the dot must be a name the code defines somewhere.
VARIABLES = {
    "bridge", "conn", "tx", "rx", "otx", "orx", "stream", "peer", "handle", "h", "log", "rs",
    "msg", "listener", "server", "receiver", "stats", "view", "batch", "session",
}

#: The console scripts' parser builders (``pyproject.toml`` names their modules).
PARSER_BUILDERS = ("parser", "_parser", "build_parser")

COMMAND_WORDS = ("aqueduct-bridge", "aqueduct-produce", "aqueduct", "make", "python", "python3")


@dataclass(frozen=True)
class Missing:
    """A name a doc cites that the repository does not have."""

    doc: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.name} ({self.why})"


# ---------------------------------------------------------------- the code's names


@dataclass
class Callable_:
    """What a call may pass: positional parameters (``self`` dropped) and keywords."""

    positional: list[str]
    keywords: set[str]
    varargs: bool
    varkw: bool


@dataclass
class ClassInfo:
    module: str
    bases: list[str]
    members: set[str] = field(default_factory=set)
    methods: dict[str, Callable_] = field(default_factory=dict)


@dataclass
class CodeIndex:
    """Names defined by the repository's Python, by an ``ast`` scan (nothing is imported)."""

    classes: dict[str, list[ClassInfo]] = field(default_factory=dict)
    functions: dict[str, list[Callable_]] = field(default_factory=dict)
    defined_in: dict[str, set[str]] = field(default_factory=dict)  # module -> its own top-level names
    words: set[str] = field(default_factory=set)  # identifiers and string-literal words
    options: dict[str, set[str]] = field(default_factory=dict)  # module -> add_argument option strings
    files: set[str] = field(default_factory=set)  # repo-relative paths of files and directories


def _signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> Callable_:
    a = fn.args
    positional = [x.arg for x in a.posonlyargs + a.args]
    if method and positional and not any(
        isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list
    ):
        positional = positional[1:]
    return Callable_(
        positional, set(positional) | {x.arg for x in a.kwonlyargs}, a.vararg is not None, a.kwarg is not None
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


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
            for target in _targets(item):
                info.members.add(target)
    if "__init__" not in info.methods and _is_dataclass_like(node):
        fields = [t.target.id for t in node.body if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name)]
        info.methods["__init__"] = Callable_(fields, set(fields), False, False)
    return info


def _is_dataclass_like(node: ast.ClassDef) -> bool:
    names = {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}
    names |= {ast.unparse(b).split(".")[-1] for b in node.bases}
    return bool(names & {"dataclass", "NamedTuple", "TypedDict"})


def _targets(stmt: ast.stmt) -> Iterator[str]:
    if isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    yield n.id
    elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        yield stmt.target.id


_WORD = re.compile(r"[A-Za-z_][\w-]*")


@cache
def code_index() -> CodeIndex:
    index = CodeIndex()
    for top in CODE_DIRS:
        for path in sorted((REPO / top).rglob("*")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(REPO).as_posix()
            index.files.add(rel)
            if path.suffix == ".py" and rel not in NOT_SCANNED:
                _scan_file(path, index)
    for path in REPO.glob("*"):
        index.files.add(path.name)
    for top in OTHER_DIRS:
        for path in (REPO / top).rglob("*"):
            index.files.add(path.relative_to(REPO).as_posix())
    mutants = tomllib.loads((REPO / "tests/mutants/mutants.toml").read_text())
    index.words |= {m["id"] for m in mutants.get("mutant", [])}
    return index


def _scan_file(path: Path, index: CodeIndex) -> None:
    module = _module_name(path)
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
            index.words.update(_WORD.findall(node.value))
            index.words.update(re.findall(r"\w+", node.value))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-"):
                    options.add(a.value)


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


def class_methods(name: str, member: str) -> list[Callable_]:
    found = [info.methods[member] for info in code_index().classes.get(name, []) if member in info.methods]
    if not found:
        for info in code_index().classes.get(name, []):
            for base in info.bases:
                found += class_methods(base, member) if base != name else []
    return found


# ---------------------------------------------------------------- commands


@cache
def console_parsers() -> dict[str, argparse.ArgumentParser]:
    """The console scripts' real parsers, by command name."""
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


#: Every argparse parser takes these.
ALWAYS = {"-h", "--help"}


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


def _options_in(words: list[str]) -> list[str]:
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
    missing: list[tuple[str, str]] = []
    prog = head
    for i, w in enumerate(rest):
        if w.endswith(":"):  # the command's own message quoted (``aqueduct-bridge serve: --pipeline ...``)
            return []
        subs = _subcommands(parser)
        if w.startswith("-"):
            continue
        if subs and re.fullmatch(r"[a-z][\w-]*", w) and not any(x.startswith("-") for x in rest[:i]):
            if w not in subs:
                missing.append((f"{prog} {w}", "no such subcommand"))
                return missing
            parser, prog = subs[w], f"{prog} {w}"
    if prog == "aqueduct" and rest and not rest[0].startswith("-"):
        pass
    known = _option_strings(parser) | ALWAYS
    for option in _options_in(rest):
        if option not in known:
            missing.append((f"{prog} {option}", "no such option"))
    return missing


def _check_python_m(rest: list[str]) -> list[tuple[str, str]]:
    if len(rest) < 2 or rest[0] != "-m":
        return []
    module = rest[1]
    rel = module.replace(".", "/")
    if not ((REPO / f"{rel}.py").exists() or (REPO / rel / "__main__.py").exists()):
        if module.split(".")[0] in CODE_DIRS or _find_spec(module) is None:
            return [(f"python -m {module}", "no such module")]
        return []
    top = module.split(".")[0]
    known = {o for m, opts in code_index().options.items() if m == top or m.startswith(top + ".") for o in opts}
    return [(f"python -m {module} {o}", "no such option") for o in _options_in(rest[2:]) if o not in known | ALWAYS]


def _find_spec(module: str) -> object | None:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


# ---------------------------------------------------------------- names


def _not_ours(name: str) -> bool:
    return any(
        name == entry or (entry.endswith((".", "*")) and name.startswith(entry.rstrip("*"))) for entry in NOT_OURS
    )


def _split_args(args: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in args:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _call_fits(call: str, candidates: list[Callable_]) -> bool:
    """Whether the doc's argument list ``call`` (without parentheses) fits one of the definitions."""
    args = _split_args(call)
    if any(a in ("...", "…") or a.startswith("*") for a in args):
        args = [a for a in args if a not in ("...", "…") and not a.startswith("*")]
        loose = True
    else:
        loose = False
    keywords = [a.split("=")[0].strip() for a in args if re.match(r"^\w+\s*=", a)]
    positional = [a for a in args if not re.match(r"^\w+\s*=", a)]
    for c in candidates:
        if not c.varkw and any(k not in c.keywords for k in keywords):
            continue
        if not c.varargs and not loose and len(positional) > len(c.positional):
            continue
        return True
    return not candidates


def _signature_of(obj: object) -> Callable_ | None:
    try:
        sig = inspect.signature(obj)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    kinds = inspect.Parameter
    return Callable_(
        [p.name for p in params if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)],
        {p.name for p in params if p.kind in (kinds.POSITIONAL_OR_KEYWORD, kinds.KEYWORD_ONLY)},
        any(p.kind is kinds.VAR_POSITIONAL for p in params),
        any(p.kind is kinds.VAR_KEYWORD for p in params),
    )


@cache
def old_paths() -> frozenset[str]:
    """Import paths that moved: ``OLD_PATHS`` of tests/unit/test_public_api.py, and every module
    that is only a :func:`aqueduct._moved.moved_module` shim. They work, with a warning; docs show the new path."""
    tree = ast.parse((REPO / "tests/unit/test_public_api.py").read_text())
    [pairs] = [
        ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.AnnAssign) and ast.unparse(n.target) == "OLD_PATHS"
    ]
    shims = {
        _module_name(p) for p in (REPO / "aqueduct").rglob("*.py") if "moved_module(__name__" in p.read_text()
    }
    return frozenset({f"{m}.{n}" for m, n in pairs} | shims)


def resolve_aqueduct(dotted: str) -> tuple[object | None, str | None]:
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


def _why_missing(path: str) -> str:
    if path in old_paths():
        return f"{path} {OLD}: show the new one"
    return "does not import"


def _module_suffix(dotted: str) -> str | None:
    """The repository module ``dotted`` names when written without its package (``flow.SendWindow``)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        suffix = ".".join(parts[:i])
        hits = [m for m in code_index().defined_in if m == suffix or m.endswith("." + suffix)]
        if hits:
            return sorted(hits, key=len)[0] + ("." + ".".join(parts[i:]) if parts[i:] else "")
    return None


_NAME = re.compile(r"^(?:await\s+)?(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\((?P<args>.*)\))?(?:\s*->.*)?$")


def check_name(text: str) -> list[tuple[str, str]]:
    """(name, why) if ``text`` looks like a code name that the repository lacks."""
    m = _NAME.match(text.strip())
    if not m:
        return []
    name, args = m["name"], m["args"]
    if _not_ours(name):
        return []
    index = code_index()
    parts = name.split(".")
    first = parts[0]
    if first == "aqueduct" and len(parts) > 1:
        obj, missing = resolve_aqueduct(name)
        if missing:
            return [(missing, _why_missing(missing))]
        if args is not None and obj is not None:
            sig = _signature_of(obj)
            if sig and not _call_fits(args, [sig]):
                return [(text, "the arguments do not fit its signature")]
        return []
    if first in CODE_DIRS[1:] and len(parts) > 1 and f"{first}.{parts[1]}" in index.defined_in:
        return _check_in_module(parts)
    if first[0].isupper() and any(c.islower() for c in first) and not first.isupper():
        return _check_class_path(text, parts, args)
    if any(p == name or p.endswith("/" + name) for p in index.files):
        return []  # a file's name: py.typed
    if len(parts) > 1 and first not in VARIABLES and first not in CODE_DIRS and _find_spec(first):
        obj, missing = resolve_aqueduct(name)  # another library's: pyarrow.compute, os.fsync
        return [(missing, "does not import")] if missing else []
    if len(parts) > 1:
        module = _module_suffix(name) if first not in VARIABLES else None
        if module and module.split(".")[-1] != parts[-1] and module != name:
            found = _check_in_module(module.split("."))
            if not found:
                return _check_call(text, module.split("."), args)
        for part in parts[1:]:
            if part not in index.words:
                return [(name, f"no {part!r} in the code")]
        return _check_call(text, parts, args)
    if args is not None or ("_" in name and name != "_") or re.search(r"[a-z][A-Z]", name):
        if name not in index.words and not _is_file_name(name) and _metric_base(name) not in index.words:
            return [(name, "not in the code")]
        return _check_call(text, parts, args)
    return []


def _is_file_name(name: str) -> bool:
    """``test_disk_full``: a test module named by its file."""
    return any(p.endswith(f"/{name}.py") for p in code_index().files)


def _metric_base(name: str) -> str:
    """``aqueduct_records_acked_total`` is the metric the code names ``records_acked``."""
    if name.startswith("aqueduct_"):
        name = name.removeprefix("aqueduct_")
        return name.removesuffix("_total")
    return name


def _check_in_module(parts: list[str]) -> list[tuple[str, str]]:
    index = code_index()
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module in index.defined_in:
            rest = parts[i:]
            if not rest:
                return []
            own = index.defined_in[module] | {
                m.rsplit(".", 1)[-1] for m in index.defined_in if m.startswith(module + ".")
            }
            if rest[0] not in own and rest[0] not in index.words:
                return [(".".join(parts[: i + 1]), f"not defined in {module}")]
            if len(rest) > 1 and rest[0] in index.classes:
                members = class_members(rest[0]) or set()
                if rest[1] not in members:
                    return [(".".join(parts[: i + 2]), f"{rest[0]} has no {rest[1]!r}")]
            return []
    return [(".".join(parts), "no such module")]


def _check_class_path(text: str, parts: list[str], args: str | None) -> list[tuple[str, str]]:
    index = code_index()
    cls = parts[0]
    if cls not in index.classes:
        if cls in index.words and len(parts) == 1:
            return []  # a name the code defines another way (an alias, a constant)
        return [(".".join(parts), "no such class in the code")]
    if len(parts) > 1:
        members = class_members(cls) or set()
        if parts[1] not in members:
            return [(f"{cls}.{parts[1]}", f"{cls} has no {parts[1]!r}")]
    if args is not None:
        member = parts[1] if len(parts) > 1 else "__init__"
        candidates = class_methods(cls, member)
        if candidates and not _call_fits(args, candidates):
            return [(text, "the arguments do not fit its signature")]
    return []


def _check_call(text: str, parts: list[str], args: str | None) -> list[tuple[str, str]]:
    if args is None:
        return []
    index = code_index()
    name = parts[-1]
    candidates = list(index.functions.get(name, []))
    for infos in index.classes.values():
        for info in infos:
            if name in info.methods:
                candidates.append(info.methods[name])
    if candidates and not _call_fits(args, candidates):
        return [(text, "the arguments do not fit its signature")]
    return []


# ---------------------------------------------------------------- paths

#: Suffixes of files that are the repository's (a bare ``x.py`` must exist somewhere in it).
REPO_SUFFIXES = (".py", ".md", ".toml")

#: Folders of a log, a checkpoint or a build, not of the repository.
LOG_DIRS = {"commits", "offsets", "corrupt", "consumers", "changes", "tls", "build", "sources", "state"}


def _check_test(name: str, test: str | None) -> list[tuple[str, str]]:
    """``test_x`` (a test file or a test), ``test_x::test_y``, ``test_y_...`` (a test's name cut short)."""
    if test:
        return check_path(f"{name}.py::{test}")
    if name.endswith("_") or _is_file_name(name):
        prefix = name.endswith("_")
        if prefix or not _is_file_name(name):
            tests = [p for p in code_index().files if p.startswith("tests/") and p.endswith(".py")]
            if not any(_defines(REPO / p, name, prefix) for p in tests):
                return [(name, "no such test")]
        return []
    return check_name(name)


def check_path(text: str) -> list[tuple[str, str]]:
    """(path, why) if ``text`` names a repository file or directory that is not there."""
    path, _, test = text.partition("::")
    path = path.strip().rstrip(":")
    if any(c in path for c in "<>*$ ") or "://" in path or path.startswith(("/", "~", ".")):
        return []
    index = code_index()
    first = path.split("/")[0]
    if first.isupper():
        return []  # a placeholder: LOG/tls/, OUT/matrix.md
    looks_ours = path.endswith(REPO_SUFFIXES) or first in CODE_DIRS or first in ("docs", "certs")
    if "/" in path and not looks_ours:
        looks_ours = any(p.split("/")[-1] == first for p in index.files if "/" in p) and not first.isupper()
    if path.endswith("/") and path.count("/") == 1 and path[:-1] not in LOG_DIRS:
        looks_ours = True  # a folder of the repository: ``bench/``, ``unit/``, ``worker/``
    if not looks_ours:
        return []
    wanted = path.rstrip("/")
    if "/" not in wanted and path.endswith("/") and wanted not in LOG_DIRS and not looks_ours:
        looks_ours = True
    hits = [p for p in index.files if p == wanted or p.endswith("/" + wanted)]
    if not hits:
        return [(path, "no such file in the repository")]
    if test:
        name = test.split("[")[0].rstrip(".…")
        if not any(_defines(REPO / h, name, prefix=test.split("[")[0] != name) for h in hits):
            return [(text, "no such test")]
    return []


def _defines(path: Path, name: str, prefix: bool) -> bool:
    if path.suffix != ".py" or not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    names = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return any(n == name or (prefix and n.startswith(name)) for n in names)


# ---------------------------------------------------------------- Markdown

_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_IN_MODULE = re.compile(r"`(?P<name>[A-Za-z_]\w*)`(?: lives| is)? in `(?P<module>aqueduct(?:\.\w+)+)`")
_IMPORT = re.compile(r"^\s*(?:from\s+(?P<from>aqueduct[\w.]*)\s+import\s+(?P<names>[^#]+)|import\s+(?P<mod>aqueduct[\w.]*))")
_CALL = re.compile(r"(?<![\w.])((?:aqueduct\.)?[A-Za-z_][\w.]*)\(([^()]*)\)")
_SOURCE_OPTION = re.compile(r"\.option\(\s*\"(\w+)\"")


def check_text(text: str, doc: str) -> list[Missing]:
    """Every missing thing ``text`` (a Markdown page called ``doc``) cites."""
    found: list[Missing] = []
    in_block = False
    lang = ""
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
            while line.rstrip().endswith("\\") and i < len(lines):
                line = line.rstrip()[:-1] + " " + lines[i]
                i += 1
            found += [Missing(doc, number, n, w) for n, w in _check_code_line(line, lang)]
            continue
        if line.startswith("    ") and line.strip().split(" ")[0] in COMMAND_WORDS:
            found += [Missing(doc, number, n, w) for n, w in _check_command_text(line.strip())]
            continue
        sentence = " ".join(lines[number - 2 : number + 1])  # a line with its neighbours
        says_old = re.search(r"deprecat|still work|was called|old path", sentence, re.IGNORECASE)
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
    return is_package and resolve_aqueduct(f"{module}.{name}")[1] is None


def check_span(span: str) -> list[tuple[str, str]]:
    """What is missing of one backticked span."""
    span = span.strip()
    words = span.split()
    if not words:
        return []
    if words[0] in ("from", "import") and len(words) > 1 and words[1].startswith("aqueduct"):
        return _check_code_line(span, "python")
    if words[0] in COMMAND_WORDS and (len(words) > 1 or words[0] != "aqueduct"):
        if words[0] in ("python", "python3") and words[1:2] != ["-m"]:
            return []
        return _check_command_text(span)
    if span.startswith("--"):
        options = _options_in(words[:1])
        return [(o, "no command takes this option") for o in options if o not in every_option() and not _not_ours(o)]
    test = re.fullmatch(r"(test_\w+)(?:\.py)?(?:::(test_\w+(?:\.\.\.|…)?))?(?:\[.*\])?", words[0])
    if test:
        return _check_test(test[1], test[2])
    if "/" in words[0] or "::" in words[0] or re.search(r"\.\w+$", words[0]) and words[0].endswith(REPO_SUFFIXES):
        return check_path(words[0].rstrip(",;:"))
    metric = re.fullmatch(r"(aqueduct_\w+)(?:\{\w+\})?(?: [<>=]+ \d+)?", span)
    if metric:
        return check_name(metric[1])
    keyword = re.fullmatch(r"(\w+)=\S*", span)
    if keyword and "_" in keyword[1] or keyword and span.endswith("="):
        return check_name(keyword[1])
    option = re.fullmatch(r'option\("(\w+)"(?:, .*)?\)', span)
    if option:
        return [] if option[1] in _source_options() else [(span, "the aqueduct source has no such option")]
    if re.fullmatch(r"[a-z]+(?:-[a-z0-9]+){2,}", span):  # a mutant's or a test case's id (or a prefix + a name)
        return [] if span in code_index().words or span.rsplit("-", 1)[0] in code_index().words else [(span, "not in the code")]
    return check_name(span)


def _check_command_text(text: str) -> list[tuple[str, str]]:
    found = []
    for part in re.split(r"\s*(?:&&|\|\||\||;)\s*", text):
        words = part.split("#")[0].split()  # a comment ends it
        while words and (re.match(r"^\w+=", words[0]) or words[0] in ("$", "sudo", "exec")):
            words = words[1:]  # the environment, a prompt
        if words and words[0].endswith("/python"):
            words[0] = "python"  # .venv/bin/python
        if words and words[0] in COMMAND_WORDS:
            found += check_command(words)
    return found


def _check_code_line(line: str, lang: str) -> list[tuple[str, str]]:
    if lang in ("", "sh", "bash", "shell", "console", "text"):
        stripped = line.strip()
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if stripped.split(" ")[0:1] and stripped.split(" ")[0].split("/")[-1] in COMMAND_WORDS or re.match(
            r"^\w+=\S+\s", stripped
        ):
            return _check_command_text(stripped)
        return []
    if lang != "python":
        return []
    found: list[tuple[str, str]] = []
    m = _IMPORT.match(line)
    if m and m["from"]:
        for name in m["names"].strip("() \\").split(","):
            name = name.split(" as ")[0].strip()
            if name and name != "*":
                obj, missing = resolve_aqueduct(f"{m['from']}.{name}")
                if missing:
                    found.append((f"from {m['from']} import {name}", _why_missing(missing)))
    elif m and m["mod"]:
        missing = resolve_aqueduct(m["mod"])[1]
        if missing:
            found.append((f"import {m['mod']}", _why_missing(missing)))
    for call in _CALL.finditer(line):  # SparkBridge(spark, log=...), aqueduct.connect(host, port, cafile=...)
        name = call[1]
        if name.startswith("aqueduct.") or (name[0].isupper() and name in code_index().classes):
            found += check_name(f"{name}({call[2]})")
    source = line.split('format("aqueduct")', 1)[1] if 'format("aqueduct")' in line else ""
    for option in _SOURCE_OPTION.findall(source):
        if option not in _source_options():
            found.append((f'option("{option}")', "the aqueduct source has no such option"))
    return found


@cache
def _source_options() -> frozenset[str]:
    from aqueduct.bridge.source import options

    return frozenset(options.OPTIONS) | frozenset(options.KAFKA_ALIASES) | frozenset(options.KAFKA_ONLY)


def _check_link(target: str, doc: str) -> list[tuple[str, str]]:
    if "://" in target or target.startswith(("#", "mailto:")):
        return []
    path = target.split("#")[0]
    if not path:
        return []
    resolved = (REPO / doc).parent / path
    return [] if resolved.exists() else [(target, "the link leads nowhere")]


def docs_to_check() -> list[Path]:
    """README.md and every Markdown page under docs/, but the exempt ones."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [
        p
        for p in pages
        if p.relative_to(REPO).as_posix() not in EXEMPT_DOCS
        and not any(p.relative_to(REPO).as_posix().startswith(d + "/") for d in EXEMPT_DIRS)
    ]


def check_docs() -> list[Missing]:
    found: list[Missing] = []
    for page in docs_to_check():
        found += check_text(page.read_text(), page.relative_to(REPO).as_posix())
    return found
