"""proto layer (see docs/architecture.md)."""
