"""Every distribution of the monorepo carries lens-core's version, and pins lens-core to it.

The shims use lens-core's private legacy machinery and the `nemo-lens` alias exists so that
`distribution("nemo-lens").version` pins lens-core: a release that bumps one version and
forgets another fails here, in the source tree and in what a session installed.
"""

from __future__ import annotations

import ast
import importlib.metadata
import pathlib
import sys
from typing import Any

import pytest
from packaging.requirements import Requirement

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import nemo.lens

PACKAGES = pathlib.Path(__file__).resolve().parents[1] / "packages"
# distribution -> its version file (None: the version is written in pyproject.toml)
VERSION_FILES = {
    "lens-core": "src/nemo/lens/version.py",
    "lens-compat-rl": "src/lens_compat_rl/version.py",
    "lens-compat-gym": "src/lens_compat_gym/version.py",
    "nemo-lens": None,
}
# The monorepo's own distributions, which each pin at the shared version.
OWN = frozenset(VERSION_FILES)


def _project(distribution: str) -> dict[str, Any]:
    path = PACKAGES / distribution / "pyproject.toml"
    if not path.is_file():
        pytest.skip(f"the sources of {distribution} are not at {path.parent}")
    project: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    return project


def _source_version(distribution: str) -> str:
    """The version the source tree gives `distribution`."""
    version_file = VERSION_FILES[distribution]
    if version_file is None:
        return str(_project(distribution)["version"])
    tree = ast.parse((PACKAGES / distribution / version_file).read_text(encoding="utf-8"))
    (value,) = [
        node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(target, "id", None) for target in node.targets] == ["__version__"]
        and isinstance(node.value, ast.Constant)
    ]
    return str(value)


def _requirements(distribution: str) -> list[Requirement]:
    """Every requirement `distribution` declares, its extras' included."""
    project = _project(distribution)
    lines = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        lines.extend(extra)
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("distribution", sorted(OWN))
def test_each_distribution_has_lens_core_s_version(distribution: str) -> None:
    """The source tree gives every distribution the version of lens-core."""
    assert _source_version(distribution) == _source_version("lens-core")


@pytest.mark.parametrize("distribution", sorted(OWN - {"lens-core"}))
def test_each_pin_on_a_sibling_is_exactly_that_version(distribution: str) -> None:
    """Every requirement on lens-core or a shim is `==` lens-core's version, nothing looser."""
    version = _source_version("lens-core")
    own = [req for req in _requirements(distribution) if req.name in OWN]

    assert own, f"{distribution} declares no requirement on lens-core or a shim"
    for requirement in own:
        assert str(requirement.specifier) == f"=={version}", str(requirement)


def test_the_alias_maps_every_lens_core_extra_and_both_shims() -> None:
    """nemo-lens installs lens-core and both shims; nemo-lens[x] installs lens-core[x] for
    each lens-core extra; [compat] names both shims."""
    core_extras = set(_project("lens-core")["optional-dependencies"])
    alias = _project("nemo-lens")
    extras: dict[str, list[str]] = alias["optional-dependencies"]

    assert set(extras) == core_extras | {"compat"}
    for extra in core_extras:
        (requirement,) = [Requirement(line) for line in extras[extra]]
        assert (requirement.name, requirement.extras) == ("lens-core", {extra})
    assert {Requirement(line).name for line in extras["compat"]} == {
        "lens-compat-rl",
        "lens-compat-gym",
    }
    # Its plain install brings both shims: code on the alias has not migrated.
    assert [Requirement(line).name for line in alias["dependencies"]] == [
        "lens-core",
        "lens-compat-rl",
        "lens-compat-gym",
    ]


@pytest.mark.parametrize("distribution", sorted(OWN))
def test_an_installed_distribution_has_the_installed_lens_core_s_version(
    distribution: str,
) -> None:
    """What the session installed agrees too: `distribution("nemo-lens").version`, the
    version Gym pins its server environments with, is lens-core's."""
    try:
        installed = importlib.metadata.distribution(distribution).version
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{distribution} is not installed")
    assert installed == importlib.metadata.version("lens-core") == nemo.lens.__version__
