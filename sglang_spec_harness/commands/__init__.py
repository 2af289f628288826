"""One module per `harness` subcommand (argument parsing and printing only) and the CLI entry point."""
