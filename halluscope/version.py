"""The package version, importable without the rest of halluscope (the CLI's --version)."""

__version__ = "0.1.0"
