"""Context engine."""
