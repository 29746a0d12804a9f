"""The lens-compat-gym release number (read by hatchling at build time)."""

__version__ = "0.4.0.dev0"
