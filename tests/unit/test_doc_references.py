"""Every module, class, function, option and command the docs cite exists.

A doc that names a missing thing fails here with the page, the line and the
name (see tests/doc_references/ for what is checked and what is prose).
The checker's own tests plant false claims in a small page and expect each
one to be caught, and true ones to pass.
"""

from __future__ import annotations

from tests.doc_references import check_docs, check_text


def test_every_name_the_docs_cite_exists() -> None:
    missing = check_docs()
    assert not missing, "docs cite what does not exist:\n" + "\n".join(map(str, missing))


PLANTED = """\
RESTART is sent by `WorkerPeer.restart(address)`.
`ProtoConfig` lives in `aqueduct.proto.config`, `Mode` in `aqueduct.proto.sender`.
Run it before a change to `source.py` or `aqueduct/bridge/ingest/ingest.py` lands.
`aqueduct.connector.nothing`, `aqueduct.connector.client.Connector`.
`aqueduct-bridge serve --no-such`, `aqueduct-bridge frobnicate`.
`make nothing`, `python -m bench.nothing`, `python -m bench.run --quickly`.
`tests/unit/test_layering.py::test_nothing`, `DurableLog.append_run`, `NoSuchClass`.
`--no-such-option`, `group_commit_intervall`, `flow.SendWindoww`, `bridge.ack_afterr(q)`.
[a link](nowhere.md), `aqueduct.runtime.retry_hint.retry_within(exc, more)`, `test_no_such_file`.

```python
from aqueduct.bridge import Nothing, SparkBridge
import aqueduct.nothing
config = WorkerConfig(cookie=b"s", initial_creditz=10)
df = spark.readStream.format("aqueduct").option("maxRecordPerTrigger", 5).load()
```

```sh
aqueduct-produce aqueduct://127.0.0.1:4433 --count 10 \\
    --bogus
```
"""

CAUGHT = {
    (1, "WorkerPeer.restart(address)"),
    (2, "aqueduct.proto.sender.Mode"),
    (3, "source.py"),
    (3, "aqueduct/bridge/ingest/ingest.py"),
    (4, "aqueduct.connector.nothing"),
    (4, "aqueduct.connector.client"),
    (5, "aqueduct-bridge serve --no-such"),
    (5, "aqueduct-bridge frobnicate"),
    (6, "make nothing"),
    (6, "python -m bench.nothing"),
    (6, "python -m bench.run --quickly"),
    (7, "tests/unit/test_layering.py::test_nothing"),
    (7, "DurableLog.append_run"),
    (7, "NoSuchClass"),
    (8, "--no-such-option"),
    (8, "group_commit_intervall"),
    (8, "aqueduct.proto.flow.SendWindoww"),
    (8, "bridge.ack_afterr"),
    (9, "nowhere.md"),
    (9, "aqueduct.runtime.retry_hint.retry_within(exc, more)"),
    (9, "test_no_such_file"),
    (12, "from aqueduct.bridge import Nothing"),
    (13, "import aqueduct.nothing"),
    (14, 'WorkerConfig(cookie=b"s", initial_creditz=10)'),
    (15, 'option("maxRecordPerTrigger")'),
    (19, "aqueduct-produce --bogus"),
}


def test_the_checker_catches_each_planted_false_claim() -> None:
    found = {(m.line, m.name) for m in check_text(PLANTED, "docs/planted.md")}
    assert found == CAUGHT


TRUE = """\
RESTART is sent by `WorkerPeer.restart()`; `Mode` lives in `aqueduct.wire.modes`, `Producer` in `aqueduct.connector`.
`aqueduct/connector/points.py`, `points.py`, `runtime/backends/udp.py`, `connector/points`, `bench/`, `LOG/tls/ca.pem`, `commits/N`.
`aqueduct.connector.Connector`, `aqueduct.runtime.retry_hint.retry_within(exc)`, `pyarrow.compute`.
`aqueduct-bridge serve --quic HOST:PORT --max-lag 400`, `aqueduct certs ./certs`, `make test`.
`python -m bench.run --quick`, `DurableLog.append`, `SparkBridge(metrics=...)`, `--max-lag`.
`bridge.ack_after(query, consumer=None)`, `flow.SendWindow`, `maxRecordsPerTrigger`, the `log` option.
`test_disk_full`, `test_ack_after_commit.py`, `aqueduct_records_acked_total{consumer}`, `StreamingQuery`.
[usage](usage.md), `from aqueduct.bridge import SparkBridge`.

```python
from aqueduct.bridge import SparkBridge, repair_checkpoint
df = spark.readStream.format("aqueduct").option("maxRecordsPerTrigger", 5).load()
```
"""


def test_the_checker_passes_true_claims_and_prose() -> None:
    assert check_text(TRUE, "docs/true.md") == []
