"""query stage."""
