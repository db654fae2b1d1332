"""Building the edits for one scope: the autocast around each forward slice, the scaled backward, the
scaler's steps, `unscale_` before gradient reads, one `scaler.update()`, and the scaler's construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from amp_lint.analysis.events import Event, EventKind
from amp_lint.analysis.file_model import Scope
from amp_lint.analysis.syntax import code_of
from amp_lint.analysis.names import dotted_name
from amp_lint.analysis.walk import visit_read_only
from amp_lint.conversion.devices import DEVICE_NAME, DeviceExpression, DeviceResolver
from amp_lint.conversion.file_context import FileContext
from amp_lint.conversion.helper_effects import dotted_calls
from amp_lint.conversion.float32_islands import keep_in_float32, products_through_calls, self_products
from amp_lint.conversion.refusals import Refusal
from amp_lint.conversion.scaler_placement import ScalerPlacement
from amp_lint.conversion.syntax import (
    Block,
    Statement,
    plain_assignments,
    same_branch,
    statement_facts,
    step_through_scaler,
    target_names,
    without_parens,
)
from amp_lint.conversion.training_steps import (
    Iteration,
    is_function_form,
    own_events,
    short_code,
)
from amp_lint.diagnostics import Applicability
from amp_lint.fixes.builder import FixBuilder
from amp_lint.fixes.reindent import shifted
from amp_lint.fixes.types import Fix

FLOAT16 = "float16"
BFLOAT16 = "bfloat16"

SCALER_NAMES = ("scaler", "grad_scaler", "amp_scaler", "gradient_scaler", "loss_scaler")
LOSS_NAMES = ("loss", "amp_loss", "train_loss", "step_loss")
# --- the plan for one scope ---------------------------------------------------------------------------


@dataclass(eq=False)
class ForwardSlice:
    block: Block
    start: int  # index in block.body
    end: int  # inclusive
    hoisted: Optional[cst.BaseStatement] = None  # `loss = <inline loss expression>`, appended at the end
    hoist_before: Optional[Statement] = None  # hoist-only slice: inserted before this statement


class EditPlanner:
    """Builds the fix for every fp32 iteration of one scope (one scaler per scope)."""

    def __init__(
        self, ctx: FileContext, dtype: str, explicit_device: Optional[str], iterations: List[Iteration]
    ) -> None:
        self.ctx = ctx
        self.tree = ctx.tree
        self.model = ctx.model
        self.dtype = dtype
        self.iterations = iterations
        self.scope = iterations[0].scope
        self.builder = FixBuilder(ctx.module)
        self.needs_torch_import = False
        self.devices = DeviceResolver(ctx, explicit_device, self._torch)
        self.devices.builder_string = self.builder.string
        self.new_names: Set[str] = set()
        # Statements to insert before a statement: (statement, [(priority, new statement)]).
        self.before: Dict[int, Tuple[cst.CSTNode, List[Tuple[int, cst.BaseStatement]]]] = {}
        self.wrapped_first: Dict[int, cst.CSTNode] = {}
        self.slices: List[ForwardSlice] = []
        self.scaler_candidates = SCALER_NAMES
        self.autocast_device: Optional[DeviceExpression] = None
        self.file_edits: list = []  # other files the conversion changes (`FileEdit`s: the scaler in a caller's file)

    # spelling
    def _torch(self, scope: Scope) -> str:
        name = self.ctx.torch_name(scope)
        if name is None:
            self.needs_torch_import = True
            return "torch"
        return name

    def _insert_before(self, statement: cst.CSTNode, *new: cst.BaseStatement, priority: int = 1) -> None:
        """Queue statements to insert before `statement` (lower priority first: the scaler before a `with`)."""
        self.before.setdefault(id(statement), (statement, []))[1].extend((priority, n) for n in new)

    # the whole plan
    def build(self) -> Fix:
        fp16 = self.dtype == FLOAT16
        first = self.iterations[0]
        transfers = self._transfer_names(self.scope)
        position = None if first.is_step_function else self._scaler_position()
        device = self.devices.resolve(self.scope, position, transfers)
        self.autocast_device = device
        torch_name = self._torch(self.scope)
        autocast = f"{torch_name}.amp.autocast({device.code}, dtype={torch_name}.{self.dtype})"
        for iteration in self.iterations:
            self._wrap_forward(iteration, autocast)
        if fp16:
            self._keep_self_products_in_float32()
            scaler = ScalerPlacement(self, self.ctx.fresh_name(self.scaler_candidates)).plan()
            for iteration in self.iterations:
                self._scale(iteration, scaler)
        self._flush()
        if self.needs_torch_import:
            self.builder.need_import("torch")
        what = "autocast + GradScaler, float16" if fp16 else "autocast, bfloat16"
        key = ("AMP100", id(self.scope.node))
        return self.builder.build(f"Convert the training loop to AMP ({what})", Applicability.UNSAFE, key=key)

    # --- forward slices ---
    def _wrap_forward(self, iteration: Iteration, autocast: str) -> None:
        covered: Set[int] = set()
        planned: List[ForwardSlice] = []
        for backward in iteration.backwards:
            if id(backward.call) in covered:
                continue
            piece = self._slice_for(iteration, backward, covered)
            if piece is None:
                loss = code_of(backward.loss) if backward.loss is not None else "the loss"
                raise Refusal(
                    f"no forward pass computing `{loss}` found before `{short_code(backward)}` in the same block"
                )
            planned.append(piece)
        for piece in planned:
            self.slices.append(piece)
            self._emit_slice(piece, autocast)

    def _targets(self, backward: Event) -> Set[str]:
        if backward.loss is None:
            return set()
        reads = statement_facts(backward.loss).reads
        return {r for r in reads if r != "self"}

    def _slice_for(self, iteration: Iteration, backward: Event, covered: Set[int]) -> Optional[ForwardSlice]:
        loss = backward.loss
        if loss is None:
            return None
        statement = backward.statement
        if not isinstance(statement, cst.SimpleStatementLine) or self.tree.block_of(statement) is None:
            raise Refusal(f"`{short_code(backward)}` shares its line with other code; put it on a line of its own")
        hoist = self._needs_hoist(iteration.scope, loss)
        if hoist and is_function_form(backward) and (not backward.call.args or backward.call.args[0].keyword):
            raise Refusal(f"`{short_code(backward)}`: pass the loss positionally to convert it")
        if hoist and len(statement.body) != 1:
            raise Refusal(f"`{short_code(backward)}` shares its line with other code; put it on a line of its own")
        targets = self._targets(backward)
        iteration_root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        node: cst.CSTNode = statement
        while True:
            block = self.tree.block_of(node)
            if block is None:
                return None
            body = list(block.body)
            index = next(i for i, s in enumerate(body) if s is node)
            found = self._search(iteration, body, index, targets, hoist)
            if found is not None:
                start, end = found
                if hoist:
                    name = self.ctx.fresh_name(LOSS_NAMES, self.new_names)
                    self.new_names.add(name)
                    hoisted = self.builder.statement(f"{name} = {code_of(without_parens(loss))}\n")
                    self._rename_loss(backward, name)
                    if start is None:
                        return ForwardSlice(block, index, index - 1, hoisted, hoist_before=node)  # type: ignore[arg-type]
                    return ForwardSlice(block, start, index - 1, hoisted)
                assert start is not None
                end = self._cover_later_losses(iteration, backward, body, index, end, covered)
                return ForwardSlice(block, start, end)
            if hoist or block is iteration_root or self.tree.parent_of(block) is iteration_root:
                return None
            # The loss is assigned before the enclosing `if`/`with`/`try`: look one block up.
            parent = self.tree.parent_of(block)
            while parent is not None and self.tree.block_of(parent) is None:
                if parent is iteration_root or isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                    return None
                parent = self.tree.parent_of(parent)
            if parent is None or parent is iteration_root:
                return None
            node = parent

    def _needs_hoist(self, scope: Scope, loss: cst.BaseExpression) -> bool:
        if dotted_name(loss) is not None:
            return False
        return any(self.ctx.call_tier(scope, call) == 2 for call in statement_facts(loss).calls)

    def _search(
        self, iteration: Iteration, body: List[cst.CSTNode], index: int, targets: Set[str], hoist: bool
    ) -> Optional[Tuple[Optional[int], int]]:
        """(start, end) of the forward slice before body[index]; start None: no statement needed (hoist only)."""
        scope = iteration.scope
        boundary = -1
        end: Optional[int] = None
        for position in range(index - 1, -1, -1):
            statement = body[position]
            if self.ctx.is_boundary(statement):
                boundary = position
                break
            if end is None and not hoist and (statement_facts(statement).assigned & targets):
                end = position
        if hoist:
            end = index - 1
            needed = set(targets)
        else:
            if end is None:
                return None
            needed = set(targets)
        best_model: Optional[int] = None
        best_compute: Optional[int] = None
        for position in range(end, boundary, -1):
            statement = body[position]
            facts = statement_facts(statement)
            if not (facts.assigned & needed):
                continue
            needed -= plain_assignments(statement)
            needed |= {r for r in facts.reads if r != "self"}
            tier = self.ctx.statement_tier(scope, statement)
            if tier == 2:
                best_model = position
            elif tier == 1:
                best_compute = position
        start = best_model if best_model is not None else best_compute
        if hoist:
            return (start, end)
        if start is None:
            # The loss is assigned from other values only (`loss = a + b`): wrap that statement if it computes.
            if not self.ctx.statement_tier(scope, body[end]):
                return None
            start = end
        if best_model is None and self.ctx.only_tensor_arithmetic(scope, body[start : end + 1]):
            computed = code_of(body[end].with_changes(leading_lines=())).strip().splitlines()[0]
            raise Refusal(
                f"no model runs where the loss is computed (`{computed}` only combines values computed earlier, "
                "e.g. log-probabilities saved when actions were chosen): autocast around it would change nothing"
            )
        return (start, end)

    def _cover_later_losses(
        self, iteration: Iteration, backward: Event, body: List[cst.CSTNode], index: int, end: int, covered: Set[int]
    ) -> int:
        """`loss_a.backward(retain_graph=True); loss_b.backward()`: both losses go in the first backward's slice."""
        for later in iteration.backwards:
            if later is backward or later.index < backward.index or id(later.call) in covered:
                continue
            targets = self._targets(later)
            later_position = self.tree.position(later.call)
            assigned_after = any(
                statement_facts(s).assigned & targets for s in body[index + 1 :] if self.tree.position(s) < later_position
            )
            if assigned_after:
                continue
            for position in range(index - 1, end, -1):
                if statement_facts(body[position]).assigned & targets:
                    end = max(end, position)
                    break
            if any(statement_facts(body[p]).assigned & targets for p in range(0, end + 1)):
                covered.add(id(later.call))
        return end

    def _rename_loss(self, backward: Event, name: str) -> None:
        def change(call: cst.CSTNode) -> cst.CSTNode:
            assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
            if is_function_form(backward):
                first = call.args[0]
                return call.with_changes(args=[first.with_changes(value=cst.Name(name)), *call.args[1:]])
            return call.with_changes(func=call.func.with_changes(value=cst.Name(name)))

        self.builder.replace(backward.call, change)

    def _emit_slice(self, piece: ForwardSlice, autocast: str) -> None:
        item = cst.WithItem(item=self.builder.expression(autocast))
        if piece.hoist_before is not None:
            assert piece.hoisted is not None
            block = cst.IndentedBlock(body=[shifted(piece.hoisted, self.builder.module.default_indent)])
            self._insert_before(piece.hoist_before, cst.With(items=[item], body=block))
            return
        members = list(piece.block.body[piece.start : piece.end + 1])
        captured: Dict[int, cst.CSTNode] = {}
        last = members[-1]
        hoisted = piece.hoisted

        for position, member in enumerate(members[:-1]):

            def capture(node: cst.CSTNode, position: int = position) -> cst.CSTNode:
                captured[position] = node
                return cst.RemoveFromParent()  # type: ignore[return-value]

            self.builder.replace(member, capture)

        count = len(members)

        def wrap(node: cst.CSTNode) -> cst.CSTNode:
            statements = [captured[p] for p in range(count - 1)] + [node]
            if hoisted is not None:
                statements.append(hoisted)
            indent = self.builder.module.default_indent
            statements = [shifted(statement, indent) for statement in statements]  # backslash continuations too
            first = statements[0]
            statements[0] = first.with_changes(leading_lines=())
            return cst.With(items=[item], body=cst.IndentedBlock(body=statements), leading_lines=first.leading_lines)

        self.builder.replace(last, wrap)
        self.wrapped_first[id(members[0])] = last

    # --- products float16 cannot hold (float16) ---
    def _keep_self_products_in_float32(self) -> None:
        """A Gram matrix in the forward slice: in a helper, it is kept in float32; inline, the conversion is refused."""
        wrapped = [s for piece in self.slices for s in piece.block.body[piece.start : piece.end + 1]]
        inline = self_products(self.scope, wrapped, self.tree)
        if inline:
            raise Refusal(
                f"`{code_of(inline[0].node)}` ({self.ctx.where(inline[0].node)}) multiplies `{inline[0].base}` by its "
                "own transpose (a Gram matrix): a sum "
                "that overflows float16 on large feature maps; move it into a function (the conversion then keeps it "
                "in float32) or convert by hand"
            )
        done: Set[int] = set()
        for product in products_through_calls(self.ctx, self.scope, wrapped):
            if id(product.statement) in done or self.tree.block_of(product.statement) is None:
                continue
            done.add(id(product.statement))
            torch_name = self._torch(product.scope)
            self.builder.replace(
                product.statement,
                lambda node, product=product, torch_name=torch_name: keep_in_float32(
                    node, product, torch_name, self.builder.module.default_indent
                ),
            )

    # --- scaling (float16) ---
    def _scale(self, iteration: Iteration, scaler: str) -> None:
        for backward in iteration.backwards:
            self._scale_backward(backward, scaler)
        for step in iteration.optimizer_steps:
            self.builder.replace(step.call, step_through_scaler(scaler))
        self._unscale_before_gradient_reads(iteration, scaler)
        anchor = self._update_anchor(iteration)
        self.builder.insert_after(anchor, self.builder.statement(f"{scaler}.update()\n"))

    def _scale_backward(self, backward: Event, scaler: str) -> None:
        if backward.kind is not EventKind.BACKWARD:
            raise Refusal(f"`{short_code(backward)}` cannot be scaled automatically")
        call = backward.call

        def scale(expression: cst.BaseExpression) -> cst.Call:
            return cst.Call(
                func=cst.Attribute(value=cst.parse_expression(scaler), attr=cst.Name("scale")),
                args=[cst.Arg(value=without_parens(expression))],
            )

        if not is_function_form(backward):

            def change(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                return node.with_changes(func=node.func.with_changes(value=scale(node.func.value)))

        else:  # torch.autograd.backward(loss, ...)
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if not positional or positional[0] is not call.args[0]:
                raise Refusal(f"`{short_code(backward)}` cannot be scaled automatically")

            def change(node: cst.CSTNode) -> cst.CSTNode:
                assert isinstance(node, cst.Call)
                first = node.args[0]
                return node.with_changes(args=[first.with_changes(value=scale(first.value)), *node.args[1:]])

        self.builder.replace(call, change)

    def _gradient_consumers(self, iteration: Iteration) -> List[cst.CSTNode]:
        """Clipping calls and statements that read `.grad`, inside the iteration (nodes, source order)."""
        consumers: List[cst.CSTNode] = [e.call for e in own_events(iteration.step, EventKind.CLIP)]
        effects = self.ctx.helper_effects
        for call in own_events(iteration.step, EventKind.CALL):
            if effects.of_call(call).reads_gradients:  # `clip_gradients(model, 1.0)`: clipping in a helper
                consumers.append(call.call)
        root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        for node in dotted_calls(root):  # `utils.clip_gradients(model, 1.0)`: a helper of another module
            if effects.of_node(node).reads_gradients:
                consumers.append(node)
        tree = self.tree

        class Reads(cst.CSTVisitor):
            def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
                return node is root

            def visit_Attribute(self, node: cst.Attribute) -> None:
                if node.attr.value == "grad" and not (dotted_name(node.value) or "").endswith("autograd"):
                    parent = tree.parent_of(node)
                    if isinstance(parent, cst.AssignTarget):
                        return
                    consumers.append(node)

        visit_read_only(root, Reads())
        return sorted(consumers, key=self.tree.position)

    def _unscale_before_gradient_reads(self, iteration: Iteration, scaler: str) -> None:
        consumers = self._gradient_consumers(iteration)
        if not consumers:
            return
        backward_positions = [self.tree.position(b.call) for b in iteration.backwards]
        unscaled: Dict[str, int] = {}
        for step in iteration.optimizer_steps:
            step_position = self.tree.position(step.call)
            earlier = [p for p in backward_positions if p < step_position]
            if not earlier:
                continue
            between = [c for c in consumers if earlier[-1] < self.tree.position(c) < step_position]
            if not between:
                continue
            if step.target is None or step.target in unscaled:
                continue
            anchor = iteration.step.anchor_statement(step)
            block = self.tree.block_of(anchor)
            in_own_loop = isinstance(anchor, cst.For) and step.target in target_names(anchor.target)
            if anchor is not step.statement and in_own_loop:
                raise Refusal(
                    f"gradients are clipped or read before `{short_code(step)}`, which steps inside its own loop"
                )
            if block is None:
                raise Refusal(f"`{short_code(step)}` is not on a line of its own")
            statement = self.tree.child_in(between[0], block)
            if statement is None or self.tree.position(statement) <= earlier[-1]:
                raise Refusal(
                    f"gradients are read outside the block of `{short_code(step)}` (before the accumulation boundary); "
                    "move the read next to the step"
                )
            unscaled[step.target] = self.tree.position(statement)
            self._insert_before(statement, self.builder.statement(f"{scaler}.unscale_({step.target})\n"))

    def _update_anchor(self, iteration: Iteration) -> cst.CSTNode:
        steps = iteration.optimizer_steps
        last = max(steps, key=lambda e: self.tree.position(e.call))
        anchor: cst.CSTNode = iteration.step.anchor_statement(last)
        root = iteration.step.loop if iteration.step.loop is not None else iteration.scope.node
        # Branches (inside the iteration) that every step sits in: the update goes in the innermost one.
        common: Optional[List[Tuple[cst.If, bool]]] = None
        for step in steps:
            own = [(b.node, b.taken) for b in step.branches if self.tree.is_inside(b.node, root)]
            if common is None:
                common = own
            else:
                length = 0
                while length < min(len(common), len(own)) and same_branch(common[length], own[length]):
                    length += 1
                common = common[:length]
        container: Optional[Block]
        if common:
            node, taken = common[-1]
            if taken:
                container = node.body if isinstance(node.body, cst.IndentedBlock) else None
            else:
                orelse = node.orelse
                is_block = isinstance(orelse, cst.Else) and isinstance(orelse.body, cst.IndentedBlock)
                container = orelse.body if is_block else None
                if orelse is None:
                    # `if i > n: break` (or `continue`, `return`): what follows the `if` is its false branch.
                    container = self.tree.block_of(node)
        elif iteration.step.loop is not None:
            body = iteration.step.loop.body
            container = body if isinstance(body, cst.IndentedBlock) else None
        else:
            scope_node = iteration.scope.node
            if isinstance(scope_node, cst.Module):
                container = scope_node
            else:
                container = scope_node.body if isinstance(scope_node.body, cst.IndentedBlock) else None
        if container is None:
            raise Refusal(
                f"`{short_code(last)}` sits in a one-line block (`if ...: {short_code(last)}`); put it on a line of its own"
            )
        lifted = self.tree.child_in(anchor, container)
        if lifted is None:
            raise Refusal("could not find where `scaler.update()` belongs after the optimizer steps")
        return lifted

    # --- the scaler's construction ---
    def _outermost_loops(self) -> List[cst.CSTNode]:
        loops: List[cst.CSTNode] = []
        for iteration in self.iterations:
            backward = iteration.backwards[0]
            outer = backward.loops[0] if backward.loops else None
            if outer is None:
                continue
            if not any(outer is loop for loop in loops):
                loops.append(outer)
        return loops

    def _scaler_anchor(self) -> cst.CSTNode:
        loops = self._outermost_loops()
        if not loops:
            # Straight-line code at module level: the scaler goes before the first forward pass.
            first = min(self.slices, key=lambda s: self.tree.position(s.hoist_before or s.block.body[s.start]))
            return first.hoist_before or first.block.body[first.start]
        return self._before_all(loops)

    def _before_all(self, nodes: List[cst.CSTNode]) -> cst.CSTNode:
        """The statement, in the innermost block that holds all `nodes`, that holds the first of them."""
        first = min(nodes, key=self.tree.position)
        chains = []
        for node in nodes:
            chain = [a for a in self.tree.ancestors(node) if isinstance(a, (cst.IndentedBlock, cst.Module))]
            chains.append(chain)
        common = None
        for block in chains[0]:
            if all(any(block is b for b in chain) for chain in chains[1:]):
                common = block
                break
        if common is None:
            raise Refusal("the training loops of this function have no common block for one GradScaler")
        statement = self.tree.child_in(first, common)
        if statement is None:
            raise Refusal("could not place the GradScaler before the training loop")
        return statement

    def _scaler_position(self) -> Optional[int]:
        loops = self._outermost_loops()
        if loops:
            return self.tree.position(min(loops, key=self.tree.position))
        return None

    def _transfer_names(self, scope: Scope) -> Set[str]:
        """Names used as a device in this scope: `.to(NAME)`, `device=NAME`."""
        names: Set[str] = set()
        node = scope.node

        class Transfers(cst.CSTVisitor):
            def visit_FunctionDef(self, inner: cst.FunctionDef) -> bool:
                return inner is node

            def visit_Call(self, call: cst.Call) -> None:
                func = call.func
                for arg in call.args:
                    key = dotted_name(arg.value)
                    if key is None:
                        continue
                    if arg.keyword is not None and arg.keyword.value == "device":
                        names.add(key)
                    elif isinstance(func, cst.Attribute) and func.attr.value == "to" and arg.keyword is None:
                        names.add(key)
                    elif DEVICE_NAME.search(key.split(".")[-1]):
                        names.add(key)  # handed on to a helper that moves the batch: `calc_loss(x, y, model, device)`

        visit_read_only(node, Transfers())
        return names

    def _bound_before(self, scope: Scope, name: str, anchor: cst.CSTNode) -> bool:
        if name.startswith("self.") or name in scope.params:
            return True
        values = scope.assignments.get(name)
        if not values:
            return any(name in outer.assignments or name in outer.params for outer in list(scope.chain())[1:])
        statement = values[0][1]
        return statement is not None and self.tree.position(statement) < self.tree.position(anchor)

    # --- output ---
    def _flush(self) -> None:
        """Statements to insert before a statement that a slice replaces go in front of the `with`."""
        for statement, queued in self.before.values():
            new = [n for _, n in sorted(queued, key=lambda item: item[0])]
            target = self.wrapped_first.get(id(statement))
            if target is None:
                self.builder.insert_before(statement, *new)
                continue
            prefix = list(new)

            def prepend(node: cst.CSTNode, prefix: List[cst.BaseStatement] = prefix) -> cst.CSTNode:
                if isinstance(node, cst.BaseStatement):
                    # The comments above the wrapped statements stay above the new first statement.
                    lines = tuple(node.leading_lines) + tuple(prefix[0].leading_lines)
                    first = prefix[0].with_changes(leading_lines=lines)
                    rest = [*prefix[1:], node.with_changes(leading_lines=())]
                    return cst.FlattenSentinel([first, *rest])  # type: ignore[return-value]
                return node

            self.builder.replace(target, prepend)


