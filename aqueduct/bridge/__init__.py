"""bridge layer (see docs/architecture.md)."""
