"""Command-line interface: one module per subcommand, parsing and printing only."""

__all__: "list[str]" = []
