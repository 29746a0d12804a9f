"""lens-compat-rl: the deprecated `record_rl_metrics`, recorded through lens's metric registry.

While this distribution is installed, `from nemo.lens.instruments.rl import
record_rl_metrics` keeps working (see `_lens_compat_rl_hook`). New code declares its own
group with `nemo.lens.register_metric_group` and records with `nemo.lens.record_metrics`;
`LEGACY_RL_SPECS` is the legacy definition, for consumers that want to keep its names.
"""

# Installing the hook here too keeps `nemo.lens.instruments.rl` importable in interpreters
# that skip .pth files (`python -S`, some bundlers), once lens_compat_rl has been imported.
import _lens_compat_rl_hook
from lens_compat_rl._record import record_rl_metrics
from lens_compat_rl._specs import LEGACY_RL_GROUP, LEGACY_RL_SPECS
from lens_compat_rl.version import __version__

_lens_compat_rl_hook.install()

__all__ = ["LEGACY_RL_GROUP", "LEGACY_RL_SPECS", "__version__", "record_rl_metrics"]
