"""join stage."""
