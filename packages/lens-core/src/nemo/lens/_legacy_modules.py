"""Serve module names that lens-core removed from the deprecation shims that still provide them.

lens-core no longer ships `nemo.lens.instruments.rl` or `nemo.lens.instruments.gym`, and a
shim must not write files into `nemo/lens/`, a directory lens-core owns. Instead a shim
declares, in its distribution's metadata, which legacy name it serves and from where:

    [project.entry-points."nemo.lens.legacy_modules"]
    "nemo.lens.instruments.gym" = "lens_compat_gym._nemo_lens_instruments_gym"

Importing `nemo.lens` appends one finder to `sys.meta_path`. Python imports a parent package
before its submodules, so the finder is in place before any `nemo.lens.*` name is looked
up. It goes last: a real module lens-core ships always wins. For a `nemo.lens.*` name no
other finder found, it reads the entry points and, if one names it, returns a spec whose
loader imports the shim's module through the normal import system and copies that module's
`__doc__` and `__all__` names into the legacy module. The legacy module thus keeps its own
name, its `__spec__.origin` and `__file__` lie inside the shim, and its functions are the
shim's own objects.

Because it reads installed metadata rather than running a `.pth` file, the legacy name works
wherever the shim's distribution is on `sys.path`: a normal or editable install, `python
-S`, a `--target` directory, a zip archive holding the `.dist-info`. Uninstalling the shim
removes its entry point, and the import fails with `ModuleNotFoundError` again.

Stdlib only, and `importlib.metadata` is imported only when a legacy name is looked up:
`import nemo.lens` pays for this small module alone.
"""

from __future__ import annotations

import importlib
import sys
from importlib.machinery import ModuleSpec
from typing import TYPE_CHECKING, Final

# importlib.abc's Loader only for type checkers: importing it pulls in importlib.resources
# (about 20 ms at every `import nemo.lens`), and the import system needs no base class.
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader as _LoaderBase
    from types import ModuleType
else:
    _LoaderBase = object


#: The entry-point group a shim declares its legacy module names in.
ENTRY_POINT_GROUP: Final = "nemo.lens.legacy_modules"
# Only names inside lens's own package are served: a shim cannot take over any other module.
_SERVED_PREFIX: Final = "nemo.lens."


def legacy_module_targets() -> dict[str, str]:
    """Each legacy module name the installed shims declare -> the module that provides it.

    Read from the installed metadata on every call (about 10 ms in a large environment);
    the finder keeps the answer until `importlib.invalidate_caches()`.
    """
    from importlib.metadata import entry_points

    targets: dict[str, str] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        # A module, never `module:attribute`; and the first declaration on sys.path wins,
        # as the first copy of a module on sys.path would.
        if entry.name.startswith(_SERVED_PREFIX) and not entry.attr:
            targets.setdefault(entry.name, entry.module)
    return targets


class _LegacyModuleLoader(_LoaderBase):
    """Fills the legacy module from the shim's real module."""

    def __init__(self, real_name: str) -> None:
        self.real_name = real_name

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        """Let the import system create a plain module."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Import the real module the normal way and copy `__doc__` and `__all__` over."""
        real = importlib.import_module(self.real_name)
        declared = vars(real).get("__all__")
        if declared is None:
            raise ImportError(
                f"{self.real_name} declares no __all__, so it cannot serve {module.__name__}",
                name=module.__name__,
            )
        public = list(declared)
        namespace = {name: getattr(real, name) for name in public}
        vars(module).update(namespace, __all__=public, __doc__=real.__doc__)

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} for {self.real_name!r}>"


class LegacyModuleFinder:
    """A meta path finder for the `nemo.lens.*` names that installed shims declare.

    Python does not remember failed imports, and a consumer may guard a legacy import on a
    hot path (NeMo-Gym swallows the ImportError), so the entry points are read once and
    kept until `importlib.invalidate_caches()`, which installers and `site.addsitedir`
    callers use after changing what is installed, as for any finder.
    """

    _targets: dict[str, str] | None = None

    @classmethod
    def invalidate_caches(cls) -> None:
        """Forget the entry points read so far (called by `importlib.invalidate_caches()`)."""
        cls._targets = None

    @classmethod
    def find_spec(
        cls,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        """A spec backed by the shim's module if an installed shim declares `fullname`."""
        if not fullname.startswith(_SERVED_PREFIX):
            return None
        targets = cls._targets
        if targets is None:
            targets = cls._targets = legacy_module_targets()
        real_name = targets.get(fullname)
        if real_name is None:
            return None
        import importlib.util

        package = real_name.partition(".")[0]
        try:
            real = importlib.util.find_spec(real_name)
        except ModuleNotFoundError as exc:
            if exc.name == package:  # metadata left behind without its package
                return None
            raise  # the shim itself is broken: show why, not "no module named ..."
        if real is None:  # the package is there, the declared module is not
            raise ModuleNotFoundError(
                f"No module named {real_name!r} (declared to serve {fullname})", name=real_name
            )
        spec = ModuleSpec(fullname, _LegacyModuleLoader(real_name), origin=real.origin)
        # With a location, the module gets `__file__` (the real file), as it did when the
        # file shipped inside lens-core.
        spec.has_location = real.has_location
        return spec


def _is_installed(finder: object) -> bool:
    # By name, not identity: a reloaded copy of this module must not add a second finder.
    finder_type = finder if isinstance(finder, type) else type(finder)
    return (
        finder_type.__module__ == __name__
        and finder_type.__qualname__ == LegacyModuleFinder.__qualname__
    )


def install() -> None:
    """Append `LegacyModuleFinder` to `sys.meta_path` unless it is already there."""
    if not any(_is_installed(finder) for finder in sys.meta_path):
        sys.meta_path.append(LegacyModuleFinder)
