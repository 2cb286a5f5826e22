"""Old path of the blocking producer: use ``from aqueduct.connector import Producer``."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.connector.producer.blocking")
