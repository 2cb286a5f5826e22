"""Interop harness: endpoints, test cases, a seeded lossy UDP proxy and a matrix runner.

See ``interop/README.md`` (the test cases) and ``docs/interop.md`` (how it works).
"""
