"""Serve the removed `nemo.lens.instruments.rl` from lens-compat-rl.

lens-core no longer ships `nemo/lens/instruments/rl.py`, and lens-compat-rl must not write
a file into a directory lens-core owns. So `lens_compat_rl_hook.pth`, installed next to
this module at the top of site-packages, imports it when the interpreter starts, and this
module appends one finder to `sys.meta_path`. The finder answers for that single module
name with a small loader that imports the real module,
`lens_compat_rl._nemo_lens_instruments_rl`, through the normal import system and copies
its public names into the legacy module. So whatever loaded `lens_compat_rl` (files, a zip
archive, a bundler's frozen importer) also serves the legacy name, and the module's
`__spec__.origin` lies in lens-compat-rl.

The finder goes last, after the regular path finder: if lens-core ever ships a real
`instruments/rl.py` again, that one wins. Start-up only pays for importing this small
module, which imports nothing beyond `sys` (already loaded); everything else waits until
`nemo.lens.instruments.rl` is imported. Uninstalling lens-compat-rl removes the `.pth`
file, and the import fails again with `ModuleNotFoundError`, as it does with lens-core
alone.
"""

# No `from __future__ import annotations` and no `typing`: both would be imported at every
# interpreter start-up. The annotations that need typing-only names are strings instead.
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader as _LoaderBase
    from importlib.machinery import ModuleSpec
    from types import ModuleType
else:
    # The import system only calls create_module and exec_module; importlib.abc would
    # pull in typing at start-up just to provide a base class.
    _LoaderBase = object

__all__ = ["LEGACY_MODULE", "LegacyRLFinder", "install"]

#: The module name legacy code imports.
LEGACY_MODULE = "nemo.lens.instruments.rl"
_SHIM_PACKAGE = "lens_compat_rl"
#: The submodule of `lens_compat_rl` whose public names `LEGACY_MODULE` serves.
_SHIM_MODULE = "_nemo_lens_instruments_rl"


class _LegacyModuleLoader(_LoaderBase):
    """Fills the legacy module from the real submodule of `lens_compat_rl`."""

    def __init__(self, real_name: str) -> None:
        self.real_name = real_name

    def create_module(self, spec: "ModuleSpec") -> "ModuleType | None":
        """Let the import system create a plain module."""
        return None

    def exec_module(self, module: "ModuleType") -> None:
        """Import the real module the normal way and copy `__doc__` and `__all__` over."""
        import importlib

        real = importlib.import_module(self.real_name)
        public = list(vars(real)["__all__"])
        namespace = {name: getattr(real, name) for name in public}
        vars(module).update(namespace, __all__=public, __doc__=real.__doc__)

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} for {self.real_name!r}>"


class LegacyRLFinder:
    """A meta path finder that knows exactly one module: `nemo.lens.instruments.rl`."""

    @classmethod
    def find_spec(
        cls,
        fullname: str,
        path: "Sequence[str] | None" = None,
        target: "ModuleType | None" = None,
    ) -> "ModuleSpec | None":
        """Return a spec for `LEGACY_MODULE` backed by the shim's submodule, else None.

        Finding the submodule imports the `lens_compat_rl` package, as finding any
        submodule does; the legacy module's loader would import it next anyway.
        """
        if fullname != LEGACY_MODULE:
            return None
        import importlib.util
        from importlib.machinery import ModuleSpec

        real_name = f"{_SHIM_PACKAGE}.{_SHIM_MODULE}"
        try:
            real = importlib.util.find_spec(real_name)
        except ModuleNotFoundError as exc:
            if exc.name == _SHIM_PACKAGE:  # a hook left behind without its package
                return None
            raise  # lens_compat_rl itself is broken: show why, not "no module named ..."
        if real is None:
            return None
        spec = ModuleSpec(fullname, _LegacyModuleLoader(real_name), origin=real.origin)
        # With a location, the module gets `__file__` (the real file), as it did when the
        # file was loaded directly.
        spec.has_location = real.has_location
        return spec


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
