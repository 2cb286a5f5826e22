"""Names and paths a doc cites: ``aqueduct.x.Y``, ``Class.method(a)``, ``snake_word``, ``dir/file.py``."""

from __future__ import annotations

import re

from tests.doc_references.code import (
    CODE_DIRS,
    OTHER_DIRS,
    REPO,
    Signature,
    class_members,
    class_methods,
    code_index,
    defines,
    find_spec,
    is_test_file,
    resolve_import,
    signature_of,
    why_missing,
)

#: Names cited in the docs that are deliberately not this repository's code.
#: An entry ending in "." or "*" covers every name it starts.
NOT_OURS = {
    # Spark: the query API, its data source API, its configuration keys, classes and errors
    "StreamingQuery", "StreamingQueryListener", "DataStreamWriter", "ReportsSourceMetrics", "ReadMaxRows",
    "Trigger.AvailableNow", "PythonMicroBatchStreamBase", "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY",
    "org.apache.spark.*", "spark.", "query.", "q.", "walCommit", "triggerExecution", "txnVersion", "txnAppId",
    "processingTime", "awaitTermination", "foreachBatch", "writeStream", "readStream", "isActive",
    "lastProgress", "toString", "from_json", "python_streaming_source_runner", "_spark_metadata",
    "SPARK_CONF_DIR", "SPARK_DAEMON_MEMORY",
    # Kafka's source options, named where the docs compare
    "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "startingTimestamp", "endingTimestamp",
    "endingOffsetsByTimestamp", "kafka.", "kafkaConsumer.", "groupIdPrefix", "fetchOffset.", "includeHeaders",
    # aioquic's classes and members, whose internals the runtime uses (architecture.md, performance.md)
    "QuicConnectionProtocol.", "QuicServer.", "_write_application",
    # prometheus_client's own process metrics
    "process_cpu_seconds_total", "process_open_fds", "process_resident_memory_bytes",
    # other tools' options: spark-submit's, docker's, pytest's, py-spy's
    "--driver-memory", "--deploy-mode", "--master", "--stop-timeout", "--basetemp", "--subprocesses",
    "--durations", "--dist",
    # Wallaroo's connector API, which the v3 session speaks to
    "AtLeastOnceSourceConnector",
    # Databricks, Linux, Python's event loop
    "dbutils.", "net.core.", "sched_setaffinity", "epoll", "loop.", "asynchat",
}  # fmt: skip

#: Backticked names users hold in a variable: ``bridge.stream()``, ``conn.stats()``.
#: What follows the dot must be a name the code defines somewhere.
VARIABLES = {
    "bridge", "conn", "tx", "rx", "otx", "orx", "stream", "peer", "handle", "h", "log", "rs", "msg",
    "listener", "server", "receiver", "stats", "view", "batch", "session",
}  # fmt: skip

#: Suffixes of files that are the repository's (a bare ``x.py`` must exist somewhere in it).
REPO_SUFFIXES = (".py", ".md", ".toml")
#: Folders of a log, a checkpoint or a build, not of the repository.
LOG_DIRS = {"commits", "offsets", "corrupt", "consumers", "changes", "tls", "build", "sources", "state"}

_NAME = re.compile(r"^(?:await\s+)?(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\((?P<args>.*)\))?(?:\s*->.*)?$")


def not_ours(name: str) -> bool:
    return any(name == e or (e.endswith((".", "*")) and name.startswith(e.rstrip("*"))) for e in NOT_OURS)


def _split_args(args: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in args:
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()] if current.strip() else parts


def call_fits(call: str, candidates: list[Signature]) -> bool:
    """Whether the doc's argument list ``call`` (without parentheses) fits one of the definitions."""
    args = _split_args(call)
    left_out = [a for a in args if a in ("...", "…") or a.startswith("*")]
    given = [a for a in args if a not in left_out]
    return not candidates or any(c.fits(given, loose=bool(left_out)) for c in candidates)


def check_name(text: str) -> list[tuple[str, str]]:
    """(name, why) if ``text`` looks like a code name that the repository lacks."""
    m = _NAME.match(text.strip())
    if not m or not_ours(m["name"]):
        return []
    name, args = m["name"], m["args"]
    index = code_index()
    parts = name.split(".")
    first = parts[0]
    if first == "aqueduct" and len(parts) > 1:
        obj, missing = resolve_import(name)
        if missing:
            return [(missing, why_missing(missing))]
        sig = signature_of(obj) if args is not None and obj is not None else None
        return [(text, "the arguments do not fit its signature")] if sig and not call_fits(args, [sig]) else []
    if first in CODE_DIRS[1:] and len(parts) > 1 and f"{first}.{parts[1]}" in index.defined_in:
        return _check_in_module(parts)  # bench.latency, demo.sinkfiles
    if first[0].isupper() and any(c.islower() for c in first):
        return _check_class_path(text, parts, args)
    if any(p == name or p.endswith("/" + name) for p in index.files):
        return []  # a file's name: py.typed
    if len(parts) > 1 and first not in VARIABLES and first not in CODE_DIRS and find_spec(first):
        missing = resolve_import(name)[1]  # another library's: pyarrow.compute, os.fsync
        return [(missing, "does not import")] if missing else []
    if len(parts) > 1:
        module = _module_of(name) if first not in VARIABLES else None
        if module:  # flow.SendWindow: a module named without its package
            return _check_in_module(module.split(".")) or _check_call(text, parts, args)
        for part in parts[1:]:
            if part not in index.words:
                return [(name, f"no {part!r} in the code")]
        return _check_call(text, parts, args)
    if args is not None or ("_" in name and name != "_") or re.search(r"[a-z][A-Z]", name):
        if name not in index.words and not is_test_file(name) and _metric_base(name) not in index.words:
            return [(name, "not in the code")]
        return _check_call(text, parts, args)
    return []  # a plain word: prose


def _module_of(dotted: str) -> str | None:
    """``flow.SendWindow`` is ``aqueduct.proto.flow.SendWindow``: the module named without its package."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        suffix = ".".join(parts[:i])
        hits = [m for m in code_index().defined_in if m == suffix or m.endswith("." + suffix)]
        if hits:
            return ".".join([min(hits, key=len), *parts[i:]])
    return None


def _metric_base(name: str) -> str:
    """``aqueduct_records_acked_total`` is the metric the code names ``records_acked``."""
    if name.startswith("aqueduct_"):
        return name.removeprefix("aqueduct_").removesuffix("_total")
    return name


def _check_in_module(parts: list[str]) -> list[tuple[str, str]]:
    index = code_index()
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        if module not in index.defined_in:
            continue
        rest = parts[i:]
        if not rest:
            return []
        submodules = {m.rsplit(".", 1)[-1] for m in index.defined_in if m.startswith(module + ".")}
        if rest[0] not in index.defined_in[module] | submodules and rest[0] not in index.words:
            return [(".".join(parts[: i + 1]), f"not defined in {module}")]
        if len(rest) > 1 and rest[0] in index.classes and rest[1] not in (class_members(rest[0]) or set()):
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
    if len(parts) > 1 and parts[1] not in (class_members(cls) or set()):
        return [(f"{cls}.{parts[1]}", f"{cls} has no {parts[1]!r}")]
    if args is not None:
        candidates = class_methods(cls, parts[1] if len(parts) > 1 else "__init__")
        if not call_fits(args, candidates):
            return [(text, "the arguments do not fit its signature")]
    return []


def _check_call(text: str, parts: list[str], args: str | None) -> list[tuple[str, str]]:
    """``send_messages(records)``: some function or method of that name must take those arguments."""
    if args is None:
        return []
    index = code_index()
    name = parts[-1]
    candidates = list(index.functions.get(name, []))
    candidates += [info.methods[name] for infos in index.classes.values() for info in infos if name in info.methods]
    return [] if call_fits(args, candidates) else [(text, "the arguments do not fit its signature")]


# ---------------------------------------------------------------- tests and paths


def check_test(name: str, test: str | None) -> list[tuple[str, str]]:
    """``test_x`` (a test file or a test), ``test_x::test_y``, ``test_y_...`` (a test's name cut short)."""
    if test:
        return check_path(f"{name}.py::{test}")
    if is_test_file(name):
        return []
    functions = code_index().functions
    known = any(f.startswith(name) for f in functions) if name.endswith("_") else name in functions
    return [] if known else [(name, "no such test")]


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
    looks_ours = path.endswith(REPO_SUFFIXES) or first in CODE_DIRS or first in OTHER_DIRS
    if "/" in path and not looks_ours:  # runtime/udp.py, bridge/source: a folder of the repository first
        looks_ours = any(p.split("/")[-1] == first for p in index.files if "/" in p)
    if path.endswith("/") and path.count("/") == 1 and path[:-1] not in LOG_DIRS:
        looks_ours = True  # a folder: ``bench/``, ``unit/``, ``worker/``
    if not looks_ours:
        return []
    wanted = path.rstrip("/")
    hits = [p for p in index.files if any(p == w or p.endswith("/" + w) for w in (wanted, wanted + ".py"))]
    if not hits:
        return [(path, "no such file in the repository")]
    if test:
        name = test.split("[")[0].rstrip(".…")
        cut_short = test.split("[")[0] != name
        if not any(defines(REPO / h, name, cut_short) for h in hits):
            return [(text, "no such test")]
    return []
