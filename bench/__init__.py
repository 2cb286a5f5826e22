"""Benchmarks: aqueduct's paths side by side with raw aioquic / plain TCP baselines.

``python -m bench.run`` (``make bench``) runs them; see ``docs/performance.md``
for the method. Every measurement runs a real server process and a real
client process over 127.0.0.1, each pinned to its own CPU core.
"""
