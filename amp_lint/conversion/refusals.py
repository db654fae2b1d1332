"""Refusals: what makes a conversion unsafe, each with a reason that says what the code does."""

from __future__ import annotations

from typing import List, Optional

import libcst as cst

from amp_lint.analysis.events import EventKind
from amp_lint.analysis.file_model import FileModel
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.walk import visit_read_only
from amp_lint.conversion.file_context import FileContext
from amp_lint.conversion.helper_effects import creates_graph, dotted_calls
from amp_lint.conversion.syntax import statement_facts, unwrap_method_chain
from amp_lint.conversion.training_steps import Iteration, own_events
from amp_lint.parse.prefilter import MANUAL_UPDATE_METHODS


class Refusal(Exception):
    """The conversion cannot be done safely; the message says why (it becomes the finding's message)."""


# --- refusals -----------------------------------------------------------------------------------------


FLOAT64_REASON = "the script trains in float64 on purpose; AMP would drop that precision"
FLOAT64_NAMES = ("torch.float64", "torch.double", "torch.DoubleTensor", "torch.cuda.DoubleTensor")


def file_refusal(ctx: FileContext, device_may_be_cuda: bool) -> Optional[str]:
    """Things anywhere in the file that make the conversion unsafe."""
    model = ctx.model
    scopes = {id(s.node): s for s in model.scopes}
    problems: List[str] = []
    tree = ctx.tree

    def weights(receiver: cst.BaseExpression) -> bool:
        """Is `receiver` a network (whose weights a cast changes), not a tensor of bookkeeping?"""
        while isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute):
            if receiver.func.attr.value not in ("to", "cuda", "cpu", "float", "type", "train", "eval"):
                break
            receiver = receiver.func.value  # `Net().cuda().double()`
        if isinstance(receiver, cst.Call):  # `nn.Linear(4, 2).double()`, `Net().double()`
            qualified = model.scopes[0].names.qualify(receiver.func) or ""
            last = qualified.split(".")[-1]
            if qualified.startswith("torch.nn.") and last[:1].isupper():
                return True
            return ctx.call_tier(model.scopes[0], receiver) == 2 or dotted_name(receiver.func) in ctx.local_module_classes
        key = dotted_name(receiver)
        return key is not None and (key in ctx.module_like or ctx.is_module_like(key))

    def float64_in(node: cst.Call, scope) -> bool:
        return any(scope.names.qualify(arg.value) in FLOAT64_NAMES for arg in node.args)

    class Scan(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            function = tree.enclosing_function(node)
            scope = scopes.get(id(function)) if function is not None else model.scopes[0]
            if scope is None:
                return
            func = node.func
            qualified = scope.names.qualify(func)
            # (`.half()` / `.to(torch.float16)` never get here: a half-precision model is not fp32 training, and
            # AMP100 is silent on it, see `already_mixed`.)  Float64 training means float64 *weights*: a network
            # cast to double, or float64 made the default dtype. `(pred == y).double().mean()` or
            # `running_corrects.double() / n` is bookkeeping of the accuracy, not training precision.
            if isinstance(func, cst.Attribute) and qualified is None:
                method = func.attr.value
                if method == "double" and weights(func.value):
                    problems.append(f"`{code_of(node)}` ({ctx.where(node)}): {FLOAT64_REASON}")
                elif method in ("to", "type") and float64_in(node, scope) and weights(func.value):
                    problems.append(f"`{code_of(node)}` ({ctx.where(node)}): {FLOAT64_REASON}")
            if qualified in ("torch.set_default_dtype", "torch.set_default_tensor_type"):
                text = code_of(node)
                if "64" in text or "double" in text.lower():
                    problems.append(f"`{text}` ({ctx.where(node)}): {FLOAT64_REASON}")
            elif qualified is not None and qualified.startswith("torch.nn.") and qualified.split(".")[-1][:1].isupper():
                for arg in node.args:  # `nn.Linear(4, 2, dtype=torch.float64)`
                    if arg.keyword is not None and arg.keyword.value == "dtype":
                        if scope.names.qualify(arg.value) in FLOAT64_NAMES:
                            problems.append(f"`{code_of(node)}` ({ctx.where(node)}): {FLOAT64_REASON}")
            if device_may_be_cuda and qualified in (
                "torch.nn.BCELoss",
                "torch.nn.modules.loss.BCELoss",
                "torch.nn.functional.binary_cross_entropy",
            ):
                problems.append(
                    f"`{code_of(node.func)}` ({ctx.where(node)}) raises an error under CUDA autocast; use `nn.BCEWithLogitsLoss` "
                    "(or `F.binary_cross_entropy_with_logits`) on the logits, without the sigmoid, then convert"
                )

    visit_read_only(ctx.module, Scan())
    return problems[0] if problems else None


def iteration_refusal(ctx: FileContext, iteration: Iteration) -> Optional[str]:
    model = ctx.model
    for event in own_events(iteration.step, EventKind.AUTOGRAD_GRAD):
        if creates_graph(event.call):
            return (
                "`torch.autograd.grad(..., create_graph=True)` (a gradient penalty) needs the scaled-gradient "
                "pattern written by hand (scale the outputs, divide the gradients by the scale)"
            )
        return "`torch.autograd.grad(...)` gradients would be scaled; convert this step by hand"
    root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
    calls = [(e.call, ctx.helper_effects.of_call(e)) for e in own_events(iteration.step, EventKind.CALL)]
    calls += [(node, ctx.helper_effects.of_node(node)) for node in dotted_calls(root)]  # `utils.penalty(...)`
    for node, effect in calls:
        if effect.gradient_penalty:
            called = code_of(node.func)
            inside = f" (in `{effect.where}`)" if effect.where and effect.where.split(".")[-1] != called.split(".")[-1] else ""
            return (
                f"`{called}(...)` ({ctx.where(node)}) runs `torch.autograd.grad(..., create_graph=True)`{inside}, "
                "a gradient penalty: it needs the scaled-gradient pattern written by hand (scale the outputs, "
                "divide the gradients by the scale)"
            )
    for step in iteration.optimizer_steps:
        closure = passed_closure(step.call)
        if closure is not None:
            return (
                f"`{code_of(step.call)}` passes a closure (`{code_of(closure)}`) to the optimizer: "
                "GradScaler.step cannot run a closure"
            )
        if is_lbfgs(model, step.target or ""):
            return f"`{step.target}` is LBFGS, which needs a closure for every step: GradScaler.step cannot run one"
    if iteration.optimizer_steps:
        manual = manual_update(ctx, iteration)
        if manual is not None:
            return (
                f"beside `{code_of(iteration.optimizer_steps[0].call)}`, another branch updates the parameters by "
                f"hand (`{manual}`) from gradients a GradScaler would leave scaled; convert that branch to a torch "
                "optimizer (or remove it) first"
            )
    for event in own_events(iteration.step, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE):
        if event:
            return "the loop already uses a GradScaler; fix it with the other AMP rules"
    return None


def passed_closure(call: cst.Call) -> Optional[cst.BaseExpression]:
    """The closure an `optimizer.step(...)` call passes: its positional argument or `closure=`.

    Other arguments (`step(**kwargs)`, `step(grad_scale=...)`) are not a closure: GradScaler.step passes them on.
    """
    for arg in call.args:
        if arg.keyword is None and not arg.star:
            return arg.value
        if arg.keyword is not None and arg.keyword.value == "closure":
            return arg.value
    return None


def is_lbfgs(model: FileModel, key: str) -> bool:
    for scope in model.scopes:
        for value, _ in scope.assignments.get(key, []):
            call = unwrap_method_chain(value)
            if isinstance(call, cst.Call):
                qualified = scope.names.qualify(call.func) or dotted_name(call.func) or ""
                if qualified.split(".")[-1] == "LBFGS":
                    return True
    return False


def manual_update(ctx: FileContext, iteration: Iteration) -> Optional[str]:
    """`p.data -= lr * p.grad` (or `p.data.add_(p.grad, alpha=-lr)`): parameters updated without an optimizer."""
    root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
    found: List[str] = []

    def mentions_grad(node: cst.CSTNode) -> bool:
        return any(a.attr.value == "grad" for a in statement_facts(node).attribute_reads)

    class Scan(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is root

        def visit_AugAssign(self, node: cst.AugAssign) -> None:
            if mentions_grad(node.value):
                found.append(code_of(node))

        def visit_Call(self, node: cst.Call) -> None:
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value in MANUAL_UPDATE_METHODS:
                if any(mentions_grad(arg.value) for arg in node.args):
                    found.append(code_of(node))

    visit_read_only(root, Scan())
    return found[0] if found else None


