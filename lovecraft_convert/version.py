"""The package's version, in a module of its own at the bottom of the layers: the manifest records
it and the CLI prints it, neither importing the package's public API (``__init__``) to read it."""

__version__ = "0.1.0"
