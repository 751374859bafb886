"""The shared vocabulary of kernelmap: frozen types every producer returns and
every renderer reads.

Nothing here imports torch, torchgen, sqlite, rich or click. Producers
(catalog, dispatch, codegen, source, graph, trace, extend) build these types;
renderers only read them. Types with a text form (operator names) have one
`parse()` and one `str()` that round-trip.

Its modules, by family: `locations` (origins and locations), `documents`
(the versioned JSON of answers), `operators` (the catalog's operators),
`calltree` (call trees, node kinds and facts, C++ symbols), and one per answer:
`where`, `explain`, `lists` (source list, scaffold), `path`. Import from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what a name below is; at run time each family is imported when one of its names is first asked for
    from kernelmap.model.locations import (
        extension_origin,
        generated_template,
        is_generated_path,
        located,
        Location,
        location_from_json,
        location_json,
        Origin,
        OriginKind,
        OriginTable,
        PYTORCH_REPO_URL,
        tags_versions,
    )
    from kernelmap.model.documents import (
        Answer,
        check_document,
        document,
        DocumentError,
        show_in_notebooks,
    )
    from kernelmap.model.operators import (
        Autograd,
        DerivativeFormula,
        Kernel,
        Op,
        OperatorName,
        OpKind,
    )
    from kernelmap.model.calltree import (
        CallNode,
        CallTree,
        CALLTREE_VERSION,
        Edge,
        EdgeKind,
        Fact,
        FACT_NAMES,
        FACTS,
        LAYERS,
        NodeKind,
        _plain,
        Symbol,
    )
    from kernelmap.model.where import (
        DispatchPath,
        DispatchStep,
        FunctionRef,
        LiveAnswer,
        NativeOverride,
        SourceStep,
        WHERE_VERSION,
        WhereAnswer,
    )
    from kernelmap.model.explain import (
        Alternative,
        EXPLAIN_VERSION,
        Explanation,
        Step,
    )
    from kernelmap.model.lists import (
        SCAFFOLD_VERSION,
        ScaffoldAnswer,
        SourceEntry,
        SourceList,
        SOURCES_VERSION,
    )
    from kernelmap.model.path import (
        PATH_VERSION,
        PathAnswer,
        Route,
    )

# name -> the module of its family: `from kernelmap.model import Op` imports
# operators (and what it needs), not the call trees or the other answers, so
# that a short command (`where --static`) builds only the types it uses.
_FAMILIES: dict[str, str] = {
    **dict.fromkeys(('extension_origin', 'generated_template', 'is_generated_path', 'located', 'Location', 'location_from_json', 'location_json', 'Origin', 'OriginKind', 'OriginTable', 'PYTORCH_REPO_URL', 'tags_versions'), 'locations'),
    **dict.fromkeys(('Answer', 'check_document', 'document', 'DocumentError', 'show_in_notebooks'), 'documents'),
    **dict.fromkeys(('Autograd', 'DerivativeFormula', 'Kernel', 'Op', 'OperatorName', 'OpKind'), 'operators'),
    **dict.fromkeys(('CallNode', 'CallTree', 'CALLTREE_VERSION', 'Edge', 'EdgeKind', 'Fact', 'FACT_NAMES', 'FACTS', 'LAYERS', 'NodeKind', '_plain', 'Symbol'), 'calltree'),
    **dict.fromkeys(('DispatchPath', 'DispatchStep', 'FunctionRef', 'LiveAnswer', 'NativeOverride', 'SourceStep', 'WHERE_VERSION', 'WhereAnswer'), 'where'),
    **dict.fromkeys(('Alternative', 'EXPLAIN_VERSION', 'Explanation', 'Step'), 'explain'),
    **dict.fromkeys(('SCAFFOLD_VERSION', 'ScaffoldAnswer', 'SourceEntry', 'SourceList', 'SOURCES_VERSION'), 'lists'),
    **dict.fromkeys(('PATH_VERSION', 'PathAnswer', 'Route'), 'path'),
}


def __getattr__(name: str):
    module = _FAMILIES.get(name)
    if module is None:
        raise AttributeError(f"module 'kernelmap.model' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"kernelmap.model.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FAMILIES))
