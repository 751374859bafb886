"""The call-graph fixtures (the indexed 2.6.0 tree, generated files, contexts), shared."""

from tests.graph.conftest import context, generated, indexed_tree  # noqa: F401
