"""demo stage."""

__all__: "list[str]" = []
