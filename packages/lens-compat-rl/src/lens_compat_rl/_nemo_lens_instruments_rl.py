"""Served as `nemo.lens.instruments.rl` by lens-core's legacy-module finder. Deprecated.

Legacy code imports `record_rl_metrics` from here; importing stays quiet (callers read its
signature at import), and the first call issues the `DeprecationWarning`.
"""

from lens_compat_rl._record import record_rl_metrics

__all__ = ["record_rl_metrics"]
