"""Loaded as `nemo.lens.instruments.gym` by lens-core's legacy-module finder. Deprecated.

Legacy code imports `record_gym_metrics` from here; importing stays quiet (callers read its
signature at import), and the first call issues the `DeprecationWarning`.
"""

from lens_compat_gym._record import record_gym_metrics

# The one private module here with an `__all__`: the finder copies exactly these names into
# the public legacy module `nemo.lens.instruments.gym`, whose `__all__` this becomes.
__all__ = ["record_gym_metrics"]
