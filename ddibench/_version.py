"""The ddibench version (one place; the package, manifests and bundles read it from here)."""

__version__ = "0.1.0"
