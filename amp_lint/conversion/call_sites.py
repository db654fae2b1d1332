"""Where a function is called: the call sites of a step function and the argument passed for a parameter."""

from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from amp_lint.analysis.file_model import Scope
from amp_lint.analysis.walk import visit_read_only
from amp_lint.conversion.file_context import FileContext
from amp_lint.conversion.syntax import SyntaxTree

# --- call sites of a step function --------------------------------------------------------------------


def call_sites(ctx: FileContext, function: cst.FunctionDef) -> List[Tuple[cst.Call, Optional[Scope]]]:
    """Every call of `function` in the file, or [] when one of its references is not a plain call."""
    sites, complete = references(ctx, function)
    return sites if complete else []


def references(ctx: FileContext, function: cst.FunctionDef) -> Tuple[List[Tuple[cst.Call, Optional[Scope]]], bool]:
    """The calls of `function` in the file with their scopes, and whether they are all its references.

    A plain function is called by name; a method by `self.name(...)`. Any other reference (passed as a
    callback, `trainer.step(...)` from outside the class, a second definition) makes the list incomplete.
    """
    name = function.name.value
    model = ctx.model
    tree = ctx.tree
    is_method = any(isinstance(a, cst.ClassDef) for a in ancestors_until_function(tree, function))
    found: List[cst.CSTNode] = []

    class Refs(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name and node is not function.name:
                found.append(node)

    visit_read_only(ctx.module, Refs())
    sites: List[Tuple[cst.Call, Optional[Scope]]] = []
    complete = len(model.functions_named(name)) == 1
    for ref in found:
        parent = tree.parent_of(ref)
        if isinstance(parent, cst.Attribute) and parent.attr is ref:
            if not is_method:
                continue  # `model.train()` is another object's attribute, not this function
            expr: cst.CSTNode = parent
            if not (isinstance(parent.value, cst.Name) and parent.value.value == "self"):
                complete = False
                continue
        elif isinstance(parent, (cst.ImportAlias, cst.FunctionDef)):
            continue
        elif isinstance(parent, cst.Arg) and parent.keyword is ref:
            continue  # `datasets.MNIST(..., train=True)`: a keyword, not this function
        else:
            expr = ref
            if is_method:
                complete = False
                continue
        call = tree.parent_of(expr)
        if not (isinstance(call, cst.Call) and call.func is expr):
            complete = False
            continue
        caller_function = tree.enclosing_function(call)
        caller = model.scope_of(caller_function) if caller_function is not None else model.scopes[0]
        sites.append((call, caller))
    return sites, complete and bool(sites)


def ancestors_until_function(tree: SyntaxTree, node: cst.CSTNode) -> List[cst.CSTNode]:
    result = []
    for ancestor in tree.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef):
            break
        result.append(ancestor)
    return result


def argument_for(function: cst.FunctionDef, call: cst.Call, param: str) -> Optional[cst.Arg]:
    positional_names = [p.name.value for p in list(function.params.posonly_params) + list(function.params.params)]
    if positional_names and positional_names[0] == "self" and isinstance(call.func, cst.Attribute):
        positional_names = positional_names[1:]
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == param:
            return arg
    positional = [a for a in call.args if a.keyword is None]
    if any(a.star for a in positional):
        return None
    if param in positional_names:
        index = positional_names.index(param)
        if index < len(positional):
            return positional[index]
    return None


