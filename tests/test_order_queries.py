"""Issue 26, principle 1: the order rules are predicates over the protocol.

What each order rule used to compute for itself is a query of the analysis (`analysis.order_*`), which
answers with `Breach`es that any rule (or tool) can ask for; the rule turns them into findings. These
tests ask the analysis directly, on our own shapes, and hold the rule modules to asking it. The last ones
hold the order rules to being entries of the protocol's predicate table (`protocol.PREDICATES`: "event E
while the state is S"), each shown by an INVALID example of its rule, and ask the one engine that
evaluates a predicate's state part (`typestate.matching`).
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amp_lint.analysis import order_accumulation, order_gradients, order_reads, order_steps, order_unscale, order_updates
from amp_lint.analysis import protocol as P
from amp_lint.analysis import typestate
from amp_lint.analysis.builder import build_model
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.paths import ASSUMED, PROVED
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.rules import ALL_RULES
from amp_lint.rules._helpers import OrderRule

RULES = Path(__file__).resolve().parent.parent / "amp_lint" / "rules"


def _model(source: str):
    return build_model(cst.parse_module("import torch\n" + textwrap.dedent(source)))


def _kinds(query, source: str):
    return [(b.kind, b.event.call.func.attr.value if hasattr(b.event.call.func, "attr") else None) for b in query(_model(source))]


def test_update_twice_and_per_optimizer():
    # Principle 1: "update-twice" at the first update, the last later update named for the fix. (Issue 46:
    # `b`'s backward before the first update; after it, the two would be complete cycles, which are legal.)
    twice = """
for x in loader:
    scaler.scale(a).backward()
    scaler.scale(b).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.step(opt_g)
    scaler.update()
"""
    breaches = list(order_updates.updates_twice(_model(twice)))
    assert [b.kind for b in breaches] == [order_updates.UPDATE_AGAIN]
    assert breaches[0].last.index > breaches[0].event.index and breaches[0].assumption is None
    per_optimizer = """
for x in loader:
    scaler.scale(loss).backward()
    for opt in optimizers:
        scaler.step(opt)
        scaler.update()
"""
    assert [b.kind for b in order_updates.updates_twice(_model(per_optimizer))] == [order_updates.UPDATE_PER_OPTIMIZER]
    # `update(new_scale)` sets the scale: not a second update.
    assert list(order_updates.updates_twice(_model(twice.replace("scaler.update()\n    scaler.step(opt_g)", "scaler.update(2.0)\n    scaler.step(opt_g)")))) == []


@pytest.mark.parametrize(
    "body, kind",
    [
        ("scaler.update()\n    scaler.step(opt)", order_updates.BEFORE_STEP),
        ("scaler.unscale_(opt)\n    scaler.update()\n    scaler.step(opt)", order_updates.RESETS_UNSCALED),
        ("if clip:\n        scaler.step(opt)\n    scaler.update()", order_updates.CHECKS_ONLY_ON_SOME_PATHS),
    ],
)
def test_update_before_inf_checks(body, kind):
    # Principle 1: update() with no inf checks recorded, or resetting an UNSCALED optimizer before its step.
    source = f"for x in loader:\n    scaler.scale(loss).backward()\n    {body}\n"
    assert [b.kind for b in order_updates.updates_before_inf_checks(_model(source))] == [kind]


def test_update_never_stepped_only_for_a_scaler_the_file_builds():
    built = "scaler = torch.amp.GradScaler()\nfor x in loader:\n    loss.backward()\n    scaler.update()\n"
    assert [b.kind for b in order_updates.updates_before_inf_checks(_model(built))] == [order_updates.NEVER_STEPPED]
    given = "def train(scaler):\n    for x in loader:\n        loss.backward()\n        scaler.update()\n"
    assert list(order_updates.updates_before_inf_checks(_model(given))) == []


def test_missing_update_in_a_loop_not_in_a_per_call_helper():
    # Principle 3: a function that steps without a backward of its own leaves update() to its caller.
    loop = "for x in loader:\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n"
    breaches = list(order_updates.missing_updates(_model(loop)))
    assert [(b.kind, b.detail) for b in breaches] == [(order_updates.MISSING_UPDATE, "in this loop")]
    helper = "def finish(scaler, opt):\n    scaler.step(opt)\n"
    assert list(order_updates.missing_updates(_model(helper))) == []


def test_unscale_twice_after_step_and_next_iteration():
    twice = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.unscale_(opt)\n    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    breaches = list(order_unscale.unscales_twice(_model(twice)))
    assert [b.kind for b in breaches] == [order_unscale.UNSCALE_TWICE]
    assert breaches[0].cause.index < breaches[0].event.index
    after = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.step(opt)\n    scaler.unscale_(opt)\n    scaler.update()\n"
    assert [b.kind for b in order_unscale.unscales_twice(_model(after))] == [order_unscale.UNSCALE_AFTER_STEP]
    skipped = (
        "for x in loader:\n    scaler.scale(l).backward()\n    scaler.unscale_(opt)\n"
        "    if not finite(opt):\n        continue\n    scaler.step(opt)\n    scaler.update()\n"
    )
    breaches = list(order_unscale.unscales_twice(_model(skipped)))
    assert [(b.kind, b.detail) for b in breaches] == [(order_unscale.UNSCALE_NEXT_ITERATION, "iteration")]
    assert breaches[0].proof is ASSUMED


def test_unscale_of_an_optimizer_named_by_an_expression_is_answered_by_the_engine():
    # Issue 26, principle 1: one protocol state per optimizer expression (`optimizers[0]`, no dotted name),
    # so the engine, not a search of the rule's own, names the earlier unscale_/step it breaks on.
    twice = (
        "for x in loader:\n    scaler.scale(l).backward()\n    scaler.unscale_(optimizers[0])\n"
        "    scaler.unscale_(optimizers[0])\n    scaler.step(optimizers[0])\n    scaler.update()\n"
    )
    model = _model(twice)
    (breach,) = order_unscale.unscales_twice(model)
    assert breach.kind == order_unscale.UNSCALE_TWICE and breach.proof is PROVED
    first, second = model.steps[0].of(EventKind.SCALER_UNSCALE)
    assert breach.cause is first and breach.event is second
    assert [v.cause for v in typestate.violations_of(flow_of(model, model.steps[0]), second, order_unscale.UNSCALE_TWICE)] == [first]
    after = twice.replace("unscale_(optimizers[0])\n    scaler.unscale_", "step(optimizers[0])\n    scaler.unscale_")
    assert [b.kind for b in order_unscale.unscales_twice(_model(after))] == [order_unscale.UNSCALE_AFTER_STEP]
    # Another expression is another optimizer.
    other = twice.replace("scaler.unscale_(optimizers[0])\n    scaler.step", "scaler.unscale_(optimizers[1])\n    scaler.step")
    assert list(order_unscale.unscales_twice(_model(other))) == []


ACCUMULATING = """
for i, x in enumerate(loader):
    loss = model(x) / accum
    scaler.scale(loss).backward()
    {every}
    if (i + 1) % accum == 0:
        {boundary}
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
"""


def test_accumulation_queries():
    # Principle 2: an accumulation boundary inside the iteration; what runs on every micro-batch.
    unscale = ACCUMULATING.format(every="scaler.unscale_(opt)", boundary="pass")
    assert [b.kind for b in order_accumulation.unscales_every_micro_batch(_model(unscale))] == [
        order_accumulation.UNSCALE_EVERY_MICRO_BATCH
    ]
    step = ACCUMULATING.format(every="scaler.step(opt)", boundary="pass")
    breaches = list(order_accumulation.steps_every_micro_batch(_model(step)))
    assert [b.kind for b in breaches] == [order_accumulation.STEP_TWICE_PER_BOUNDARY]
    assert breaches[0].accumulation is not None
    right = ACCUMULATING.format(every="pass", boundary="scaler.unscale_(opt)")
    assert list(order_accumulation.unscales_every_micro_batch(_model(right))) == []
    assert list(order_accumulation.losses_not_divided(_model(right))) == []
    undivided = right.replace("model(x) / accum", "model(x)")
    breaches = list(order_accumulation.losses_not_divided(_model(undivided)))
    assert [b.kind for b in breaches] == [order_accumulation.LOSS_NOT_DIVIDED]
    assert breaches[0].node is not None


def test_zero_grad_closure_and_saved_state():
    zero = "for x in loader:\n    scaler.scale(l).backward()\n    opt.zero_grad()\n    scaler.step(opt)\n    scaler.update()\n"
    breaches = list(order_gradients.zero_grads_before_step(_model(zero)))
    assert [b.kind for b in breaches] == [order_gradients.ZERO_GRAD_SAME_OPTIMIZER]
    assert breaches[0].other.call.func.attr.value == "step" and breaches[0].cause is not None
    closure = "scaler = torch.amp.GradScaler()\nscaler.scale(l).backward()\nscaler.step(opt, closure=c)\nscaler.update()\n"
    assert [b.kind for b in order_gradients.closures_to_scaler_step(_model(closure))] == [order_gradients.CLOSURE_KEYWORD]
    saved = (
        "scaler = torch.amp.GradScaler()\nfor x in loader:\n    scaler.scale(l).backward()\n    scaler.step(opt)\n"
        "    torch.save(scaler, 'ckpt.pt')\n    scaler.update()\n"
    )
    breaches = list(order_gradients.scaler_saved_mid_iteration(_model(saved)))
    assert [b.kind for b in breaches] == [order_gradients.PICKLED_MID_ITERATION]


def test_direct_steps_and_scaled_reads():
    direct = "for x in loader:\n    scaler.scale(l).backward()\n    opt.step()\n"
    assert [b.kind for b in order_steps.direct_steps(_model(direct))] == [order_steps.STEP_SCALED]
    around = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.unscale_(opt)\n    opt.step()\n    scaler.update()\n"
    assert [b.kind for b in order_steps.direct_steps(_model(around))] == [order_steps.AROUND_UNSCALED]
    clip = (
        "for x in loader:\n    scaler.scale(l).backward()\n    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)\n"
        "    scaler.step(opt)\n    scaler.update()\n"
    )
    breaches = list(order_reads.scaled_gradient_reads(_model(clip)))
    assert [(b.kind, b.detail) for b in breaches] == [(order_reads.READ_SCALED, "clips")]
    unscaled = clip.replace("    torch.nn", "    scaler.unscale_(opt)\n    torch.nn")
    assert list(order_reads.scaled_gradient_reads(_model(unscaled))) == []


def test_a_step_through_the_scaler_and_a_direct_step_apply_the_gradients_twice():
    # Issue 26, principle 1: the protocol records which steps applied an optimizer's gradients in the
    # iteration (update() does not reset that), and the engine names the second: "applied-twice".
    torchvision = (
        "for x in loader:\n    if scaler is not None:\n        scaler.scale(l).backward()\n        scaler.step(opt)\n"
        "        scaler.update()\n    else:\n        l.backward()\n    opt.step()\n"
    )
    model = _model(torchvision)
    (breach,) = order_steps.direct_steps(model)
    assert breach.kind == order_steps.STEPPED_TWICE and breach.scaler == "scaler" and breach.proof is PROVED
    step = model.steps[0]
    (scaler_step,) = step.of(EventKind.SCALER_STEP)
    (direct,) = step.of(EventKind.OPTIMIZER_STEP)
    assert [(v.cause, v.scaler) for v in typestate.run(flow_of(model, step)).at(direct, "applied-twice")] == [(scaler_step, "scaler")]
    # Either order: the direct step first, then the scaler's (the violation sits at the later one).
    before = "for x in loader:\n    scaler.scale(l).backward()\n    opt.step()\n    scaler.step(opt)\n    scaler.update()\n"
    model = _model(before)
    assert [b.kind for b in order_steps.direct_steps(model)] == [order_steps.STEPPED_TWICE]
    (scaler_step,) = model.steps[0].of(EventKind.SCALER_STEP)
    assert [v.cause.kind for v in typestate.run(flow_of(model, model.steps[0])).at(scaler_step, "applied-twice")] == [EventKind.OPTIMIZER_STEP]
    # A scaler step with no scaled backward of its scaler in the iteration applies nothing of this one's;
    # another optimizer is another state.
    assert list(order_steps.direct_steps(_model("for x in loader:\n    scaler.step(opt)\n    opt.step()\n    scaler.update()\n"))) == []
    other = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.step(opt)\n    scaler.update()\n    opt_b.step()\n"
    assert [b.kind for b in order_steps.direct_steps(_model(other))] != [order_steps.STEPPED_TWICE]


# The rule modules whose detection is a query of the analysis: they turn breaches into findings (messages
# and fixes) and run no path or protocol question of their own.
PREDICATE_RULES = [
    "amp021_missing_update.py",
    "amp022_update_before_step.py",
    "amp023_update_twice.py",
    "amp024_unscale_twice.py",
    "amp025_closure_to_scaler_step.py",
    "amp031_clip_error_if_nonfinite.py",
    "amp040_step_every_microbatch.py",
    "amp041_unscale_outside_boundary.py",
    "amp042_accumulated_loss_not_divided.py",
    "amp043_zero_grad_before_step.py",
    "amp081_scaler_state_mid_iteration.py",
]
DETECTION_MODULES = {"amp_lint.analysis.typestate", "amp_lint.analysis.accumulation", "amp_lint.analysis.gradient_effects"}


@pytest.mark.parametrize("name", PREDICATE_RULES)
def test_order_rules_ask_the_analysis(name):
    tree = ast.parse((RULES / name).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert any(m and m.startswith("amp_lint.analysis") for m in imported)
    assert not imported & DETECTION_MODULES, f"{name} computes its own protocol states"
    assert any(m and m.startswith("amp_lint.analysis.order_") for m in imported)


# --- the order rules are entries of the protocol's predicate table -----------------------------------
# Each order rule's query, as the rule asks it.
QUERIES = {
    "AMP020": order_steps.direct_steps,
    "AMP021": order_updates.missing_updates,
    "AMP022": order_updates.updates_before_inf_checks,
    "AMP023": order_updates.updates_twice,
    "AMP024": order_unscale.unscales_twice,
    "AMP025": order_gradients.closures_to_scaler_step,
    "AMP030": order_reads.scaled_gradient_reads,
    "AMP031": order_reads.clips_raising_on_nonfinite,
    "AMP040": order_accumulation.steps_every_micro_batch,
    "AMP041": order_accumulation.unscales_every_micro_batch,
    "AMP042": order_accumulation.losses_not_divided,
    "AMP043": order_gradients.zero_grads_before_step,
    "AMP081": order_gradients.scaler_saved_mid_iteration,
}
ORDER_MODULES = [order_accumulation, order_gradients, order_reads, order_steps, order_unscale, order_updates]
# Shown only on a project (its proof reads every file): tests/test_never_updated_alias.py exercises it.
NEEDS_A_PROJECT = {"update-never-in-project"}


def _breach_kinds_yielded(module) -> set:
    """The breach kinds a query module can yield: the constants passed first to `Breach(...)` (or chosen
    into a variable passed first), read from its source."""
    tree = ast.parse(Path(module.__file__).read_text())
    kinds = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Breach" and node.args:
            for name in ast.walk(node.args[0]):
                if isinstance(name, ast.Name) and name.id.isupper():
                    kinds.add(getattr(module, name.id))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kind" for t in node.targets):
            for name in ast.walk(node.value):
                if isinstance(name, ast.Name) and name.id.isupper() and isinstance(getattr(module, name.id, None), str):
                    kinds.add(getattr(module, name.id))
    return kinds


def test_every_breach_is_a_predicate_of_the_protocol_table():
    yielded = set().union(*(_breach_kinds_yielded(m) for m in ORDER_MODULES))
    assert yielded == set(P.PREDICATE_OF), (yielded ^ set(P.PREDICATE_OF))
    assert len(P.PREDICATE_OF) == len(P.PREDICATES)  # one entry per kind
    for predicate in P.PREDICATES:
        assert predicate.operation in P.OPERATIONS | {P.END, P.MICRO_BATCH, P.SAVE}, predicate
        assert predicate.stage in (None,) + P.STAGES, predicate
        assert predicate.grads is None or set(predicate.grads) <= set(P.GRAD_STATES), predicate
        assert predicate.violation is None or predicate.violation in P.VIOLATIONS, predicate


def test_every_order_rule_lists_its_predicates_next_to_its_docs():
    rules = {rule.code: rule for rule in ALL_RULES}
    assert {p.rule for p in P.PREDICATES} == set(QUERIES)
    for code in QUERIES:
        rule = rules[code]
        assert rule.predicates == P.predicates_of(code) and rule.predicates, code
        section = rule.explanation_section("Protocol predicates")
        assert all(f"`{p.kind}`" in section for p in rule.predicates), code
    assert all(not rule.predicates for rule in ALL_RULES if rule.code not in QUERIES)


@pytest.mark.parametrize("code", sorted(QUERIES))
def test_every_order_rule_is_declarative_one_message_per_predicate(code):
    """Issue 26, principle 1: an order rule is its code, docs, examples, the analysis query it reports and one
    message per protocol predicate; `check` is the one `OrderRule.check` (no rule walks paths or states)."""
    (rule,) = [r for r in ALL_RULES if r.code == code]
    assert issubclass(rule, OrderRule) and "check" not in vars(rule), code
    assert rule.query is QUERIES[code], code
    assert set(rule.messages) == {p.kind for p in rule.predicates}, code


def test_an_order_rules_message_names_the_breachs_calls():
    (rule,) = [r for r in ALL_RULES if r.code == "AMP024"]
    source = "for x in loader:\n    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    (finding,) = rule().check(build_model(cst.parse_module(source)))
    assert finding.message.startswith("`scaler.unscale_(opt)` runs again after `scaler.unscale_(opt)` with no `scaler.update()`")
    assert finding.fix is not None and finding.assumption is None


@pytest.mark.parametrize("code", sorted(QUERIES))
def test_every_predicate_is_shown_by_an_invalid_example_of_its_rule(code):
    (rule,) = [r for r in ALL_RULES if r.code == code]
    shown = set()
    for example in rule.invalid:
        for breach in QUERIES[code](build_model(cst.parse_module(textwrap.dedent(example.code)))):
            assert breach.predicate.rule == code
            shown.add(breach.kind)
    assert shown == {p.kind for p in rule.predicates} - NEEDS_A_PROJECT


def _states_before(source: str, kind: EventKind, nth: int = 0):
    model = _model(source)
    (step,) = model.steps
    flow = flow_of(model, step)
    event = step.of(kind)[nth]
    return flow, event, typestate.run(flow).before.get(id(event), frozenset())


def test_the_engine_evaluates_a_predicate_over_the_states_at_an_event():
    # "unscale_ while the optimizer is UNSCALED": the second unscale_ only.
    source = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.unscale_(opt)\n    scaler.unscale_(opt)\n    scaler.step(opt)\n    scaler.update()\n"
    _, _, states = _states_before(source, EventKind.SCALER_UNSCALE, 0)
    assert states and typestate.matching(states, order_unscale.UNSCALE_TWICE, "scaler", "opt") == []
    flow, second, states = _states_before(source, EventKind.SCALER_UNSCALE, 1)
    assert typestate.matching(states, order_unscale.UNSCALE_TWICE, "scaler", "opt") == list(states)
    first = flow.step.of(EventKind.SCALER_UNSCALE)[0]
    assert [v.cause for v in typestate.violations_of(flow, second, order_unscale.UNSCALE_TWICE)] == [first]
    # "read grads while they are SCALED": a clip before unscale_, not one after it.
    clip = "for x in loader:\n    scaler.scale(l).backward()\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\n    scaler.step(opt)\n    scaler.update()\n"
    _, _, states = _states_before(clip, EventKind.CLIP)
    assert typestate.matching(states, order_reads.READ_SCALED, "scaler")
    _, _, states = _states_before(clip.replace("    torch.nn", "    scaler.unscale_(opt)\n    torch.nn"), EventKind.CLIP)
    assert states and not typestate.matching(states, order_reads.READ_SCALED, "scaler")
    # "update while no inf checks are recorded" / "update after an update of this iteration".
    twice = "for x in loader:\n    scaler.scale(l).backward()\n    scaler.update()\n    scaler.step(opt)\n    scaler.update()\n"
    _, _, states = _states_before(twice, EventKind.SCALER_UPDATE, 0)
    assert typestate.matching(states, order_updates.BEFORE_STEP, "scaler")
    assert not typestate.matching(states, order_updates.UPDATE_AGAIN, "scaler")
    _, _, states = _states_before(twice, EventKind.SCALER_UPDATE, 1)
    assert typestate.matching(states, order_updates.UPDATE_AGAIN, "scaler")
    assert not typestate.matching(states, order_updates.BEFORE_STEP, "scaler")


def test_the_engine_says_how_sure_a_predicate_is_at_an_event():
    """Issue 26, principle 1: the proof level comes from the protocol states at the event, not from a path
    walk of the rule's own: "the optimizer is UNSCALED at the direct step" holds on one branch only
    (ASSUMED); "UNSCALED, or no inf checks recorded" holds whichever way `if clip:` goes (PROVED)."""
    source = (
        "for x in loader:\n    scaler.scale(l).backward()\n    if clip:\n        scaler.unscale_(opt)\n"
        "        torch.nn.utils.clip_grad_norm_(p, 1.0)\n    opt.step()\n    scaler.update()\n"
    )
    _, _, states = _states_before(source, EventKind.OPTIMIZER_STEP)
    assert len(states) == 2
    assert typestate.proof_of(states, "scaler", "opt", order_steps.AROUND_UNSCALED) is ASSUMED
    assert typestate.proof_of(states, "scaler", "opt", order_steps.AROUND_UNSCALED, order_steps.CLOSED_BY_UPDATE) is PROVED
    assert typestate.proof_of(states, "scaler", "opt", order_updates.UPDATE_AGAIN) is None
    assert typestate.proof_of(frozenset(), "scaler", "opt", order_steps.AROUND_UNSCALED) is None
    (breach,) = order_steps.direct_steps(_model(source))
    assert breach.kind == order_steps.AROUND_UNSCALED and breach.proof is PROVED


def test_a_breach_names_its_predicate():
    (breach,) = order_unscale.unscales_twice(_model("for x in loader:\n    scaler.scale(l).backward()\n    scaler.step(opt)\n    scaler.unscale_(opt)\n    scaler.update()\n"))
    assert breach.predicate == P.PREDICATE_OF[order_unscale.UNSCALE_AFTER_STEP]
    assert (breach.predicate.operation, breach.predicate.stage) == (P.UNSCALE, P.STEPPED)


STEPS_ON_BOTH_SIDES = '''
import torch

scaler = torch.amp.GradScaler("cuda")


def train(model, opt, loader, flag):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        if flag:
            scaler.step(opt)
        else:
            scaler.step(opt)
        scaler.unscale_(opt)
        scaler.update()
'''

def test_an_answer_with_two_causes_is_the_same_in_every_process(tmp_path):
    # Principle 1 (one engine): the protocol states reaching an event are a set, and events hash by identity,
    # so a violation with two causes (the steps on both sides of an if/else) was named in the order the
    # process's memory gave: another message and another fix from run to run. The engine answers in
    # source order, and the last cause (the else side's step) is the one reported and fixed.
    import json
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(STEPS_ON_BOTH_SIDES)
    command = [sys.executable, "-m", "amp_lint", "check", "--no-cache", "--isolated", "--output-format", "json", "train.py"]
    answers = {subprocess.run(command, cwd=tmp_path, capture_output=True, text=True).stdout for _ in range(6)}
    assert len(answers) == 1, answers
    [finding] = json.loads(answers.pop())
    assert (finding["code"], finding["location"]["row"]) == ("AMP024", 16)  # the string starts with a blank line
    assert finding["fix"]["edits"][0]["location"]["row"] == 15  # before the else side's step
