"""The public API, and every import path the docs ever showed: a move cannot break them silently.

``PUBLIC`` is what users import today (the docs show these paths): each must
import without a warning. ``OLD_PATHS`` are paths the docs showed before a
move: each must still work and warn (``DeprecationWarning``) naming the new
path, for one release (see :mod:`aqueduct._moved`). When you move a public
name, add its old path here.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

PUBLIC: list[tuple[str, str]] = [
    # what `aqueduct` exports: the channels (from aqueduct.runtime) and their errors (docs/usage.md)
    ("aqueduct", "__version__"),
    ("aqueduct", "oneshot"),
    ("aqueduct", "Sender"),
    ("aqueduct", "Receiver"),
    ("aqueduct", "Server"),
    ("aqueduct", "ServerConnection"),
    ("aqueduct", "Connection"),
    ("aqueduct", "Mode"),
    ("aqueduct", "Message"),
    ("aqueduct", "Finished"),
    ("aqueduct", "OneshotSender"),
    ("aqueduct", "OneshotReceiver"),
    ("aqueduct", "PayloadError"),
    ("aqueduct", "AqueductError"),
    ("aqueduct", "LocalProtocolError"),
    ("aqueduct", "RemoteProtocolError"),
    ("aqueduct", "Cancelled"),
    ("aqueduct", "ReceiverClosed"),
    ("aqueduct", "LostInTransit"),
    ("aqueduct", "ConnectionLost"),
    ("aqueduct", "CertificateRefused"),
    # what `aqueduct.runtime` exports, and the helpers docs/usage.md shows
    ("aqueduct.runtime", "channel"),
    ("aqueduct.runtime", "oneshot"),
    ("aqueduct.runtime", "connect"),
    ("aqueduct.runtime", "serve"),
    ("aqueduct.runtime", "Sender"),
    ("aqueduct.runtime", "Receiver"),
    ("aqueduct.runtime", "Server"),
    ("aqueduct.runtime", "ServerConnection"),
    ("aqueduct.runtime", "Connection"),
    ("aqueduct.runtime", "Mode"),
    ("aqueduct.runtime", "Message"),
    ("aqueduct.runtime", "Finished"),
    ("aqueduct.runtime", "OneshotSender"),
    ("aqueduct.runtime", "OneshotReceiver"),
    ("aqueduct.runtime", "PayloadError"),
    ("aqueduct.runtime", "CertificateRefused"),
    ("aqueduct.runtime.retry_hint", "retry_within"),
    ("aqueduct.runtime.retry_hint", "retry_window"),
    ("aqueduct.runtime.retry_hint", "RetryWindow"),
    # what `aqueduct.connector` exports: producers (docs/connector.md) and the worker side
    ("aqueduct.connector", "ConnectorStream"),
    ("aqueduct.connector", "Delivery"),
    ("aqueduct.connector", "ORDERED"),
    ("aqueduct.connector", "UNRELIABLE"),
    ("aqueduct.connector", "Mode"),
    ("aqueduct.connector", "ConnectorClosed"),
    ("aqueduct.connector", "ConnectorRefused"),
    ("aqueduct.connector", "CreditTimeout"),
    ("aqueduct.connector", "TlsRefused"),
    ("aqueduct.connector", "StreamRefused"),
    ("aqueduct.connector", "DurableStream"),
    ("aqueduct.connector", "WorkerConfig"),
    ("aqueduct.connector", "WorkerSession"),
    ("aqueduct.connector", "ConnectorSession"),
    ("aqueduct.connector", "WorkerPeer"),
    ("aqueduct.connector", "WorkerSink"),
    ("aqueduct.connector", "MemorySink"),
    ("aqueduct.connector", "serve_tcp"),
    ("aqueduct.connector", "serve_aqueduct"),
    # the paths the connector docs and examples showed before they showed aqueduct.connector
    ("aqueduct.connector.producer.client", "Connector"),
    ("aqueduct.connector.producer.client", "UNORDERED"),
    ("aqueduct.connector.producer.client", "Delivery"),
    ("aqueduct.connector.producer.blocking", "Producer"),
    # the bridge in your own Spark job (docs/own-pipeline.md)
    ("aqueduct.bridge", "SparkBridgeError"),
    # the first entries
    ("aqueduct", "channel"),
    ("aqueduct", "connect"),
    ("aqueduct", "serve"),
    ("aqueduct.connector", "Connector"),
    ("aqueduct.connector", "Producer"),
    ("aqueduct.connector", "UNORDERED"),
    ("aqueduct.connector.frames", "ConnectorMessage"),
    ("aqueduct.bridge", "SparkBridge"),
    ("aqueduct.bridge", "repair_checkpoint"),
    ("aqueduct.bridge.source", "register"),
    ("aqueduct.runtime", "HeaderContext"),
    ("aqueduct.runtime.certs", "generate_certs"),
    ("aqueduct.runtime.backends.tls", "client_configuration"),
    ("aqueduct.proto.connection", "ConnectionMachine"),
    ("aqueduct.wire.frames", "MessageFrame"),
]

OLD_PATHS: list[tuple[str, str]] = [
    ("aqueduct.connector.client", "Delivery"),
    ("aqueduct.connector.blocking", "Producer"),
    ("aqueduct.bridge", "ReceiverError"),
    ("aqueduct.connector.client", "Connector"),
    ("aqueduct.connector.client", "UNORDERED"),
    ("aqueduct.connector.frames", "Message"),
    ("aqueduct.bridge", "Receiver"),
    ("aqueduct.runtime.tls", "client_configuration"),
    ("aqueduct.runtime.quic_server", "BoundedQuicServer"),
    ("aqueduct.proto.connection", "Connection"),
    ("aqueduct.wire.frames", "Message"),
    ("aqueduct.bridge.app.receiver", "SparkBridge"),
    ("aqueduct.connector.points", "StreamPoints"),
]

@pytest.mark.parametrize(("module", "name"), PUBLIC, ids=[f"{m}.{n}" for m, n in PUBLIC])
def test_a_public_name_imports_without_a_warning(module: str, name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert getattr(importlib.import_module(module), name) is not None


#: Run in a fresh interpreter: the old path's warning fires on its first import,
#: and reloading modules inside the suite would split its classes in two.
_CHECK_OLD_PATH = """
import importlib, sys, warnings
module, name = sys.argv[1], sys.argv[2]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    value = getattr(importlib.import_module(module), name)
assert value is not None, (module, name)
messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
assert any("instead" in m for m in messages), messages
print(messages[0])
"""


@pytest.mark.parametrize(("module", "name"), OLD_PATHS, ids=[f"{m}.{n}" for m, n in OLD_PATHS])
def test_an_old_path_still_works_and_warns(module: str, name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHECK_OLD_PATH, module, name], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr


def test_no_two_classes_of_the_package_share_a_name() -> None:
    """One class per name: a reader (or a traceback) naming ``Message`` or ``Connection`` means one thing."""
    import ast
    from collections import defaultdict
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "aqueduct"
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(package)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
