"""The query ``aqueduct-bridge serve`` runs: a no-code sink, or the user's pipeline.

``--sink parquet|console|memory`` writes the raw rows. ``--pipeline
module:function`` hands the log's streaming DataFrame to the user's
``function(df)``, which returns what to run: a ``DataStreamWriter`` (the
bridge names it ``--query-name``, gives it ``--checkpoint`` and starts it)
or a ``StreamingQuery`` it started itself (then name, checkpoint and
trigger are all its own). Whatever goes wrong in between is reported as a
:class:`PipelineError` naming the pipeline, never as a traceback from deep
inside Spark.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple


class PipelineError(RuntimeError):
    """The ``--pipeline`` cannot be loaded, raised, or returned something unusable."""


def load_pipeline(spec: str) -> Callable[[Any], Any]:
    """Import ``module:function`` (the module found on ``sys.path``) and return the function."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise PipelineError(f"--pipeline {spec!r}: expected MODULE:FUNCTION, e.g. my_job:build")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        raise PipelineError(f"--pipeline {spec}: cannot import {module_name!r}: {exc!r}") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise PipelineError(f"--pipeline {spec}: {module_name} has no function {attr!r}")
    declared = _declared_return(function)
    if declared in REFUSED_RETURNS:
        raise PipelineError(f"--pipeline {spec} is declared to return {declared}; {EXPECTED}")
    return function


#: what a pipeline must return, said whenever it returns (or declares) something else
EXPECTED = "it must return a DataStreamWriter (df.writeStream...) or a StreamingQuery it started"
#: return annotations known unusable before Spark starts: the usual slip is a transformation's ``-> DataFrame``
REFUSED_RETURNS = {"DataFrame", "None"}


def _declared_return(function: Callable[..., Any]) -> str | None:
    """The last name of ``function``'s return annotation (``"DataFrame"`` for ``-> pyspark.sql.DataFrame``).

    What it returns is known for sure only once it ran, on a DataFrame,
    which needs Spark's session: seconds after the start. An annotation is
    the one thing known before, without evaluating it (a string under
    ``from __future__ import annotations``, maybe of a name not imported).
    """
    try:
        returns = inspect.signature(function).return_annotation
    except (TypeError, ValueError):  # a callable without a signature
        return None
    if returns is inspect.Signature.empty:
        return None
    if returns is None:
        return "None"
    name = returns if isinstance(returns, str) else getattr(returns, "__name__", "")
    return name.strip().strip("'\"").rpartition(".")[2] or None


class StartedPipeline(NamedTuple):
    """The pipeline's running query, and the checkpoint the bridge gave it (None: its own)."""

    query: Any
    checkpoint: Path | None


def start_pipeline(spec: str, df: Any, *, query_name: str, checkpoint: Path) -> StartedPipeline:
    """Run the user's ``build(df)`` and return the started ``StreamingQuery``."""
    from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

    build = load_pipeline(spec)
    try:
        result = build(df)
    except Exception as exc:  # noqa: BLE001 - reported with the pipeline's name
        raise PipelineError(f"--pipeline {spec} raised {exc!r}") from exc
    if isinstance(result, StreamingQuery):
        return StartedPipeline(result, None)
    if isinstance(result, DataStreamWriter):
        writer = result.queryName(query_name).option("checkpointLocation", str(checkpoint))
        try:
            return StartedPipeline(writer.start(), checkpoint)
        except Exception as exc:  # noqa: BLE001 - e.g. a sink option Spark rejects
            raise PipelineError(f"--pipeline {spec}: starting its query failed: {exc}") from exc
    raise PipelineError(f"--pipeline {spec} returned {type(result).__name__}; {EXPECTED}")


def start_sink(
    df: Any, sink: str, *, query_name: str, checkpoint: Path, output_dir: Path, trigger_interval: float
) -> Any:
    """Start the no-code query: the raw rows into Parquet, the console or memory."""
    writer = (
        df.writeStream.queryName(query_name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=trigger_option(trigger_interval))
    )
    if sink == "parquet":
        writer = writer.format("parquet").option("path", str(output_dir))
    elif sink == "console":
        writer = writer.format("console").option("truncate", "false")
    else:
        writer = writer.format("memory")
    return writer.start()


def trigger_option(interval: float) -> str:
    """Spark's ``processingTime`` for a trigger interval in seconds."""
    return f"{interval:g} seconds"


def local_session(
    master: str, log_level: str, app_name: str = "aqueduct-bridge", ui_port: int | None = None
) -> Any:
    """A SparkSession for the bridge's own driver (loopback only for ``local``).

    Spark's UI is off unless ``ui_port`` is given (it then listens there, on
    the driver's bind address: loopback for a ``local`` master). Adaptive
    query execution is off: the session runs streaming queries, for which
    Spark turns it off anyway, warning at every query start that it does.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    defaults = {
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.sql.adaptive.enabled": "false",
    }  # fmt: skip
    if ui_port is not None:
        defaults |= {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}
    if master.startswith("local"):  # an embedded driver needs no network exposure
        defaults |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    for key, value in defaults.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
