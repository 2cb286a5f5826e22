"""A ``--pipeline`` whose code makes Spark's JVM exit on its own (``System.exit(3)``) when told to.

User code (or a library it calls) ending the JVM is how a JVM exits by
itself under a running bridge without any signal; status 3 is also what a
JVM started with ``-XX:+ExitOnOutOfMemoryError`` ends with. The query
itself is the no-code sink's: the raw rows into Parquet at ``OUTPUT_ENV``.
The test asks for the exit by creating the file named in ``EXIT_ENV``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path
from typing import Any

OUTPUT_ENV = "AQUEDUCT_TEST_OUTPUT"
EXIT_ENV = "AQUEDUCT_TEST_EXIT_FILE"
EXIT_STATUS = 3


def _exit_when_told(spark: Any, request: Path) -> None:
    while not request.exists():
        time.sleep(0.05)
    with contextlib.suppress(Exception):  # the call never returns: its connection ends with the JVM
        spark.sparkContext._jvm.java.lang.System.exit(EXIT_STATUS)


def raw_rows_until_told_to_exit(df: Any) -> Any:
    """The raw rows into Parquet; the JVM exits once ``EXIT_ENV``'s file appears."""
    watcher = threading.Thread(
        target=_exit_when_told, args=(df.sparkSession, Path(os.environ[EXIT_ENV])), name="exit-when-told", daemon=True
    )
    watcher.start()
    return df.writeStream.format("parquet").option("path", os.environ[OUTPUT_ENV]).trigger(processingTime="0.5 seconds")
