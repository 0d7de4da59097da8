"""Small helpers shared by every stage (atomic output files)."""

__all__: "list[str]" = []
