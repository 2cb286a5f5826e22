"""The demo and its tooling: simulated producers, a workload, an output verifier.

This is not part of the product a user imports (``aqueduct``): it drives
``make demo`` and the end-to-end tests. ``python -m demo --help`` runs it.
"""
