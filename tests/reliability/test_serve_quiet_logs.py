"""``aqueduct-bridge serve --log-format json`` under a service manager: a quiet start, SIGTERM to its group under load.

A real bridge process (its own Spark JVM, Parquet) leading a process
group of its own, as systemd or a container runtime starts a service,
under paced producers as in
:mod:`tests.reliability.test_serve_stops_under_load` (which checks the
text form's SIGINT and a JVM killed or exiting under the bridge). Once
the query committed a micro-batch and acked the producers, SIGTERM goes
to the whole process group, as a service manager stops a service. The
JVM runs in a session of its own, so only the bridge gets the signal: it
stops its query, makes its log durable, exits 0 with one line, and
leaves no process behind (:meth:`Loaded.end`).

What it printed, from start to stop, is what a log shipper reads:

- every line one JSON object, Spark's JVM and Python workers included;
- none of Spark's harmless start warnings: adaptive query execution "not
  supported in streaming" (off in the bridge's session), Hadoop's missing
  native library (kept out at DEBUG), the host name resolving to a
  loopback address (a local master's JVM is told its address; this
  machine's name resolves to 127.0.0.1, so Spark warns here unless told),
  nor that a source "may not guarantee processing new data" (Spark's
  warning for an ``AvailableNow`` query over a reader without support);
- after the signal, no error and no stack trace from the tasks the stop
  interrupts.

One bridge start checks all of it: a Spark start costs tens of seconds
on two cores.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import psutil
import pytest

from tests.reliability.faults import Figures
from tests.reliability.test_bridge_faults import bridge_process
from tests.reliability.test_serve_stops_under_load import Loaded
from tests.spark.test_bridge_stops import _jvms

pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(shutil.which("java") is None, reason="needs a JVM for Spark: run `make java`"),
]

#: Spark's harmless start warnings, as the JVM words them
HARMLESS = ("spark.sql.adaptive.enabled", "NativeCodeLoader", "native-hadoop", "resolves to a loopback address",
            "SPARK_LOCAL_IP", "may not guarantee processing new data")  # fmt: skip


async def test_sigterm_to_the_group_under_load_logs_only_json_lines_none_of_sparks_start_warnings_and_no_trace(
    figures: Figures, tmp_path: Path, certs
) -> None:
    jvms: list[psutil.Process] = []

    def stop_the_unit(family: list[psutil.Process]) -> None:
        jvms.extend(_jvms(family))  # its JVM: in a session of its own, untouched by the signal
        assert bridge.child.proc is not None
        os.killpg(bridge.child.proc.pid, signal.SIGTERM)

    async with bridge_process(tmp_path, certs, tcp=True, args=("--log-format", "json"), own_session=True) as bridge:
        await bridge.start(query=False)  # "listening on" is inside a JSON object here
        loaded = Loaded(bridge)
        try:
            status, since_sigterm = await loaded.end(stop_the_unit)
        finally:
            await loaded.close()
    figures.faults = {"sigterm_to_the_group": 1}
    figures.extra["acked_at_sigterm"] = loaded.acked()
    lines = [line for line in bridge.child.log.read_text().splitlines() if not line.startswith("--- start ")]
    assert status == 0 and jvms
    docs = [json.loads(line) for line in lines]  # every line the bridge and its JVM printed
    assert any(d["logger"] == "aqueduct.bridge.app.jvm_log" for d in docs), "no line of Spark's JVM came through"
    (stopped,) = [d for d in docs if d.get("event") == "stopped"]
    assert stopped["message"].startswith("SIGTERM: stopped in ")
    assert ", everything acked is durable" in stopped["message"]
    assert [line for line in lines if any(h in line for h in HARMLESS)] == []
    # Spark's warnings of the running query may still come (a batch falling behind); no error, no trace
    noise = [
        d for d in map(json.loads, since_sigterm.splitlines())
        if d["level"] in ("ERROR", "CRITICAL") or (d["level"] == "WARNING" and "trace" in d)
    ]  # fmt: skip
    assert noise == [], noise
