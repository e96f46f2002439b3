"""Subcommands of the `nvmw` CLI: one module each, discovered by nvmw.cli."""
