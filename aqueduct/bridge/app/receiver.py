"""Moved to :mod:`aqueduct.bridge.app.spark_bridge` (the module is named after the class it holds)."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.bridge.app.spark_bridge")
