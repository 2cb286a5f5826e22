"""Old path of the producer library: use ``from aqueduct.connector import Connector``."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.connector.producer.client")
