"""Serve the removed `nemo.lens.instruments.rl` from lens-compat-rl.

lens-core no longer ships `nemo/lens/instruments/rl.py`, and lens-compat-rl must not write
a file into a directory lens-core owns. So `lens_compat_rl_hook.pth`, installed next to
this module at the top of site-packages, imports it when the interpreter starts, and this
module appends one finder to `sys.meta_path`. The finder answers for that single module
name with a file inside the `lens_compat_rl` package, so the module's `__spec__.origin`
lies in lens-compat-rl.

The finder goes last, after the regular path finder: if lens-core ever ships a real
`instruments/rl.py` again, that one wins. Start-up only pays for importing this small,
stdlib-only module; nothing else runs until `nemo.lens.instruments.rl` is imported.
Uninstalling lens-compat-rl removes the `.pth` file, and the import fails again with
`ModuleNotFoundError`, as it does with lens-core alone.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["LEGACY_MODULE", "LegacyRLFinder", "install"]

#: The module name legacy code imports.
LEGACY_MODULE = "nemo.lens.instruments.rl"
_SHIM_PACKAGE = "lens_compat_rl"
#: The file, inside the `lens_compat_rl` package, that is loaded as `LEGACY_MODULE`.
_SHIM_FILE = "_nemo_lens_instruments_rl.py"


class LegacyRLFinder:
    """A meta path finder that knows exactly one module: `nemo.lens.instruments.rl`."""

    @classmethod
    def find_spec(
        cls,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """Return the spec of the shim's module for `LEGACY_MODULE`, else None."""
        if fullname != LEGACY_MODULE:
            return None
        # Looking up a top-level package imports nothing; it only asks the path finders,
        # so this works the same for a wheel and for an editable install.
        package = importlib.util.find_spec(_SHIM_PACKAGE)
        if package is None:
            return None
        for directory in package.submodule_search_locations or ():
            candidate = os.path.join(directory, _SHIM_FILE)
            if os.path.isfile(candidate):
                return importlib.util.spec_from_file_location(fullname, candidate)
        return None


def _is_installed(finder: object) -> bool:
    # Compare by name, not identity: an editable install can expose this module twice
    # (site-packages and the source tree), and a second copy must not add a second finder.
    finder_type = finder if isinstance(finder, type) else type(finder)
    return finder_type.__module__ == __name__ and finder_type.__qualname__ == "LegacyRLFinder"


def install() -> None:
    """Append `LegacyRLFinder` to `sys.meta_path` unless it is already there."""
    if not any(_is_installed(finder) for finder in sys.meta_path):
        sys.meta_path.append(LegacyRLFinder)


install()
