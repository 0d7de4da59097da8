"""Small helpers shared by every stage (atomic output files)."""
