"""Ports for a test server that must come back on the same number (a bridge restarted after a kill).

The tests' name for :mod:`bench.processes`, where the benchmarks that run
the same servers find them too (see there why such a port lies below the
ephemeral range).
"""

from __future__ import annotations

from bench.processes import LOWEST, ephemeral_start, free_port

__all__ = ["LOWEST", "ephemeral_start", "free_port"]
