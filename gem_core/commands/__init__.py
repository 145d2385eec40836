"""CLI subcommands, one module each, registered by :mod:`gem_core.cli`."""
