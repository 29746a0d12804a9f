"""lens-compat-rl: the deprecated `record_rl_metrics`, recorded through lens's metric registry.

While this distribution is installed, `from nemo.lens.instruments.rl import
record_rl_metrics` keeps working: its entry point in the `nemo.lens.legacy_modules` group
tells lens-core's legacy-module finder to serve that name from
`lens_compat_rl._nemo_lens_instruments_rl`. New code declares its own group with
`nemo.lens.register_metric_group` and records with `nemo.lens.record_metrics`;
`LEGACY_RL_SPECS` is the legacy definition, for consumers that want to keep its names.
"""

from lens_compat_rl._record import record_rl_metrics
from lens_compat_rl._specs import LEGACY_RL_GROUP, LEGACY_RL_SPECS
from lens_compat_rl.version import __version__

__all__ = ["LEGACY_RL_GROUP", "LEGACY_RL_SPECS", "__version__", "record_rl_metrics"]
