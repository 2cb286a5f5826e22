"""``aqueduct-bridge serve --log-format json`` stopped by SIGTERM under load: every line JSON, no trace of the stop.

A real bridge process (its own Spark JVM, Parquet) under paced producers,
as in :mod:`tests.reliability.test_serve_stops_under_load`, which checks
the text form's stops and that a JVM killed under the bridge still gives
its one error line. Here the JSON form: what Spark's JVM and its Python
workers print comes through the bridge's logger too, so a log shipper gets
one JSON object per line from start to stop, and the tasks the stop
interrupts leave no error and no stack trace behind. Nor does the start say that
a source "may not guarantee processing new data" (Spark's warning for an
``AvailableNow`` query over a reader without support for it).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from tests.reliability.faults import Figures
from tests.reliability.test_bridge_faults import bridge_process
from tests.reliability.test_serve_stops_under_load import Loaded

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM for Spark: run `make java`"),
]


async def test_a_sigterm_under_load_logs_only_json_lines_and_no_error_or_trace_from_the_stop(
    figures: Figures, tmp_path: Path, certs
) -> None:
    async with bridge_process(tmp_path, certs, tcp=True, args=("--log-format", "json")) as bridge:
        await bridge.start(query=False)  # "listening on" is inside a JSON object here
        loaded = Loaded(bridge)
        try:
            assert bridge.child.proc is not None
            status, since_sigterm = await loaded.end(lambda _: bridge.child.proc.send_signal(signal.SIGTERM))
        finally:
            await loaded.close()
    figures.faults = {"sigterm": 1}
    figures.extra["acked_at_sigterm"] = loaded.acked()
    lines = [line for line in bridge.child.log.read_text().splitlines() if not line.startswith("--- start ")]
    assert status == 0
    docs = [json.loads(line) for line in lines]  # every line the bridge and its JVM printed
    assert any(d["logger"] == "aqueduct.bridge.app.jvm_log" for d in docs), "no line of Spark's JVM came through"
    (stopped,) = [d for d in docs if d.get("event") == "stopped"]
    assert stopped["message"].startswith("SIGTERM: stopped in ")
    # Spark's warnings of the running query may still come (a batch falling behind); no error, no trace
    noise = [
        d for d in map(json.loads, since_sigterm.splitlines())
        if d["level"] in ("ERROR", "CRITICAL") or (d["level"] == "WARNING" and "trace" in d)
    ]  # fmt: skip
    assert noise == [], noise
    assert not any("may not guarantee processing new data" in line for line in lines)
