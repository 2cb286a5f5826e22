"""Moved to :mod:`aqueduct.runtime.backends.quic_server`; this path warns and goes in the next release."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.runtime.backends.quic_server")
