"""The package version, below every layer so any module may record it."""

__version__ = "0.1.0"
