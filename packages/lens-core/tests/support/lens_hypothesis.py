"""The Hypothesis profile every test run loads (each tests/conftest.py calls `load_profile`).

"ci" has no deadline and passes the too-slow health check: the nox cells run two pytest
workers on two shared cores, where a 200 ms deadline fails a test for the machine's load,
not for lens. The example budget stays Hypothesis's fixed default (100 a test) unless a
test sets its own, and examples stay random, so each run tries new inputs; a failure
prints its reproduction blob. `LENS_HYPOTHESIS_PROFILE=default` restores Hypothesis's
own defaults.
"""

from __future__ import annotations

import os


def load_profile() -> None:
    """Register lens's "ci" profile and load the one LENS_HYPOTHESIS_PROFILE names ("ci")."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # the API-only session installs pytest alone
        return
    settings.register_profile(
        "ci",
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
        print_blob=True,
        derandomize=False,
    )
    settings.load_profile(os.environ.get("LENS_HYPOTHESIS_PROFILE", "ci"))
