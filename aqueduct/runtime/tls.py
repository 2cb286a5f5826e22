"""Moved to :mod:`aqueduct.runtime.backends.tls`; this path warns and goes in the next release."""

from aqueduct._moved import moved_module

moved_module(__name__, "aqueduct.runtime.backends.tls")
