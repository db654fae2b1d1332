"""`analysis.walk._child_fields` reads the fields LibCST visits from the constants of each node type's
`_visit_and_replace_children`; it must agree with its source text (`visit_required(self, "field", ...)`),
for every node type of the installed LibCST."""

from __future__ import annotations

import dataclasses
import inspect
import re

import libcst as cst

from amp_lint.analysis import walk

_VISITED_FIELD = re.compile(r'visit_\w+\(\s*self,\s*"(\w+)"')


def _from_source(node_type: type):
    named = list(dict.fromkeys(_VISITED_FIELD.findall(inspect.getsource(node_type._visit_and_replace_children))))
    declared = [f.name for f in dataclasses.fields(node_type)]
    return tuple(named if named and all(name in declared for name in named) else declared)


def test_the_fields_read_from_the_code_are_those_its_source_names():
    node_types = [
        kind
        for kind in vars(cst).values()
        if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and "_visit_and_replace_children" in vars(kind)
    ]
    assert len(node_types) > 100
    for kind in node_types:
        assert walk._child_fields(kind) == _from_source(kind), kind.__name__
