"""Old path of the points-of-reference rulebook: use ``aqueduct.records.points``."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.records.points")
