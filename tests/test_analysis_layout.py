"""The analysis package reads as its pipeline: small modules, each saying what it holds, and one way of
normalising a branch test for the lexical checks (`Branch.condition`) and the flow graph (`conditions`)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amp_lint.analysis.conditions import atom_of
from amp_lint.analysis.events import Branch

ANALYSIS = Path(__file__).resolve().parent.parent / "amp_lint" / "analysis"
MAX_LINES = 600


@pytest.mark.parametrize("path", sorted(ANALYSIS.glob("*.py")), ids=lambda path: path.name)
def test_module_is_small_and_says_what_it_holds(path):
    text = path.read_text(encoding="utf-8")
    assert text.count("\n") < MAX_LINES, f"{path.name}: split it along its steps"
    docstring = cst.parse_module(text).body[0] if text.strip() else None
    assert docstring is not None and "\"\"\"" in cst.Module([docstring]).code, f"{path.name} has no module docstring"


def _branches(source: str):
    module = cst.parse_module(source)
    return [statement for statement in module.body if isinstance(statement, cst.If)]


@pytest.mark.parametrize(
    "first,second,agree",
    [
        ("if amp:\n    pass\n", "if not amp:\n    pass\n", False),
        ("if self.scaler is not None:\n    pass\n", "if self.scaler:\n    pass\n", True),
        ("if scaler is None:\n    pass\n", "if scaler:\n    pass\n", False),
        # The forms the flow graph already normalised and the event list did not (it called them unrelated).
        ("if use_amp is True:\n    pass\n", "if not use_amp:\n    pass\n", False),
        ("if (use_amp):\n    pass\n", "if use_amp:\n    pass\n", True),
        ("if use_amp == False:\n    pass\n", "if use_amp:\n    pass\n", False),
    ],
)
def test_branch_condition_is_the_flow_graphs_atom(first, second, agree):
    (one,), (other,) = _branches(first), _branches(second)
    here, there = Branch(node=one, taken=True).condition, Branch(node=other, taken=True).condition
    assert here == tuple(atom_of(one.test, True)) and there == tuple(atom_of(other.test, True))
    assert here[0] == there[0]
    assert (here[1] == there[1]) is agree


# --- layers (issue 43): each module imports only from its own layer and the layers below, with no circle ---

# The analysis in the order it runs; a module may import only from its own layer and the ones above it here.
LAYERS = [
    (
        "per-function facts: events, values, the control-flow graph, calls",
        {
            "syntax", "names", "walk", "conditions", "cfg", "paths", "value_types", "def_use", "values",
            "dict_splats", "linear_grads", "autocast", "events", "leaving_branches", "single_pass_loops",
            "scaler_scan", "function_summary", "parameter_loops",
        },
    ),
    (
        "the file model, assembled from them",
        {
            "project_hooks", "file_model", "builder", "assignments", "autocast_regions", "calls", "backward_calls",
            "steps", "scaled_arguments",
        },
    ),
    (
        "project summaries: callers and callees across files",
        {
            "project", "package_files", "callers", "attribute_classes", "instance_calls", "foreign_modules",
            "caller_search", "project_factories", "scaler_classes", "summaries", "scaler_reach", "gradient_effects",
        },
    ),
    (
        "the protocol run over the paths of an iteration",
        {"protocol", "scaler_flow", "flow_queries", "typestate", "accumulation", "epochs", "iteration_limit"},
    ),
    (
        "rule predicates",
        {
            "order", "order_accumulation", "order_gradients", "order_reads", "order_steps", "order_unscale",
            "order_updates", "tensor_evidence",
        },
    ),
]


def _imported_analysis_modules(path: Path):
    """(imported analysis module, line) for every import of the module: at module level, under `if
    TYPE_CHECKING:` and inside functions alike (an import deferred to dodge a circle is still one)."""
    import ast

    modules = {p.stem for p in ANALYSIS.glob("*.py")}
    package = "amp_lint.analysis"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # `from . import x`, `from .x import y`, `from ..analysis.x import y`
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(above + ([base] if base else []))
            if base == package:
                names = [alias.name for alias in node.names]
            elif base.startswith(package + "."):
                names = [base[len(package) + 1 :].split(".")[0]]
        elif isinstance(node, ast.Import):
            names = [a.name[len(package) + 1 :].split(".")[0] for a in node.names if a.name.startswith(package + ".")]
        for name in names:
            if name in modules and name != path.stem:
                yield name, node.lineno


def _import_graph():
    return {path.stem: sorted(set(_imported_analysis_modules(path))) for path in sorted(ANALYSIS.glob("*.py"))}


def _a_cycle(graph):
    """One import circle of `graph` as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in sorted({name for name, _ in graph.get(module, ())}):
            if state.get(target) == "open":
                return stack[stack.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found:
                return found
    return None


def test_imports_are_read_wherever_they_are_written(tmp_path):
    module = tmp_path / "some_module.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from amp_lint.analysis import names\n"
        "from . import cfg\n"
        "from ..analysis.paths import Paths\n"
        "import amp_lint.analysis.values\n"
        "if TYPE_CHECKING:\n    from amp_lint.analysis.file_model import Scope\n"
        "def f():\n    from amp_lint.analysis.summaries import ACTIVE\n"
    )
    found = sorted(name for name, _ in _imported_analysis_modules(module))
    assert found == ["cfg", "file_model", "names", "paths", "summaries", "values"]


def test_cycle_finder_finds_a_circle_and_none_where_there_is_none():
    assert _a_cycle({"a": [("b", 1)], "b": [("c", 2)], "c": [("a", 3)]}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": [("b", 1)], "b": [("c", 2)], "c": []}) is None


def test_analysis_has_no_import_circle():
    cycle = _a_cycle(_import_graph())
    assert cycle is None, "amp_lint/analysis imports in a circle: " + " -> ".join(cycle)


def test_every_analysis_module_has_one_layer():
    modules = {path.stem for path in ANALYSIS.glob("*.py")} - {"__init__"}
    assigned = [module for _, members in LAYERS for module in members]
    assert len(assigned) == len(set(assigned)), "a module is in two layers"
    assert not modules - set(assigned), f"give these modules a layer in LAYERS: {sorted(modules - set(assigned))}"
    assert not set(assigned) - modules, f"LAYERS names modules that are gone: {sorted(set(assigned) - modules)}"


def test_analysis_imports_run_only_downward():
    layer_of = {module: at for at, (_, members) in enumerate(LAYERS) for module in members}
    upward = [
        f"{module} (layer {layer_of[module] + 1}: {LAYERS[layer_of[module]][0]}) imports {target} (layer "
        f"{layer_of[target] + 1}) at line {line}"
        for module, imports in _import_graph().items()
        for target, line in imports
        if module in layer_of and target in layer_of and layer_of[target] > layer_of[module]
    ]
    assert not upward, "imports running back up:\n" + "\n".join(upward)
