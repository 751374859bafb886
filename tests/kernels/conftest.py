"""The kernel tests use the real 2.6.0 tree and its index (the fixtures of the source tests)."""

from tests.source.conftest import no_user_selection, real_build, real_index, real_tree, real_tree_root  # noqa: F401
