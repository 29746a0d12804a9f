"""The lens-compat-rl release number (read by hatchling at build time)."""

__version__ = "0.3.0"
