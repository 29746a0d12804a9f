"""Fixtures for lens-compat-rl's own tests. Without the distribution every module here is
reported as skipped; a run whose LENS_TEST_SHIMS names it is refused instead (lens_shims)."""

from __future__ import annotations

import lens_hypothesis
import lens_shims
from lens_shims import isolated_registry, pipeline  # noqa: F401  (the fixtures used here)

lens_hypothesis.load_profile()
lens_shims.check_listed_shims()
pytest_pycollect_makemodule = lens_shims.skip_modules_without("rl")
