"""Penumbra: monitoring live events whose timestamps are uncertain."""

__version__ = "0.1.0"
