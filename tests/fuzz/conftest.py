"""Hypothesis profiles for the property tests: `ci` (the default, a bounded
budget inside `make test`) and `fuzz` (`make fuzz`: many more examples, no
deadline). HYPOTHESIS_PROFILE picks one."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz", max_examples=2000, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def generated(session_cache):
    """The installed torch's generated files (once per session)."""
    from kernelmap.codegen import generated_files

    return generated_files()
