"""lens-compat-gym: the deprecated `record_gym_metrics`, recorded through lens's metric registry.

While this distribution is installed, `from nemo.lens.instruments.gym import
record_gym_metrics` keeps working: its entry point in the `nemo.lens.legacy_modules` group
tells lens-core's legacy-module finder to serve that name from
`lens_compat_gym._nemo_lens_instruments_gym`. New code declares its own group with
`nemo.lens.register_metric_group` and records with `nemo.lens.record_metrics`;
`LEGACY_GYM_SPECS` is the legacy definition, for consumers that want to keep its names.
"""

from lens_compat_gym._record import record_gym_metrics
from lens_compat_gym._specs import LEGACY_GYM_GROUP, LEGACY_GYM_SPECS
from lens_compat_gym.version import __version__

__all__ = ["LEGACY_GYM_GROUP", "LEGACY_GYM_SPECS", "__version__", "record_gym_metrics"]
