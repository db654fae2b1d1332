"""The flow queries that AMP002..AMP031 ask (`amp_lint.analysis.scaler_flow`, "queries for AMP002..AMP031"):
order and feasibility of events, assignment sites and statements as path questions on the step's graph."""

from __future__ import annotations

import textwrap

import libcst as cst

from amp_lint.analysis.builder import build_model
from amp_lint.analysis.events import EventKind
from amp_lint.analysis.paths import ASSUMED, PROVED
from amp_lint.analysis.scaler_flow import flow_of
from amp_lint.analysis.flow_queries import (
    Site,
    again_in_loop,
    any_path,
    first_of,
    in_iteration,
    last_of,
    reaching,
    whole_scope_flow,
    site_path,
)


def _model(source: str):
    return build_model(cst.parse_module(textwrap.dedent(source)))


def _sites(model, target):
    return [s for s in model.assignment_sites if s.target == target]


def test_an_assignment_that_continues_never_reaches_the_backward():
    model = _model(
        """
for x, y in loader:
    loss = eval_loss(x)
    if not training:
        continue
    loss = train_loss(x)
    loss.backward()
"""
    )
    step = model.steps[0]
    flow = flow_of(model, step)
    backward = step.of(EventKind.BACKWARD)[0]
    first, second = _sites(model, "loss")
    assert site_path(flow, first, backward) is PROVED  # a path exists (when training)...
    found = reaching(flow, backward, [first, second])
    assert [site for site, _ in found] == [second]  # ...but the second assignment always rebinds it first


def test_both_sides_of_an_if_else_reach_the_merge():
    model = _model(
        """
for x in loader:
    if warmup:
        h = a(x)
    else:
        h = b(x)
    loss = h.sum()
    loss.backward()
"""
    )
    flow = flow_of(model, model.steps[0])
    use = _sites(model, "loss")[0]
    found = reaching(flow, use, _sites(model, "h"))
    assert len(found) == 2 and all(proof is PROVED for _, proof in found)
    # Neither side runs after the other: both are last, and first; the later in the list is taken.
    sides = _sites(model, "h")
    assert site_path(flow, sides[0], sides[1]) is None and site_path(flow, sides[1], sides[0]) is None
    assert last_of(flow, sides) is sides[1] and first_of(flow, sides) is sides[0]


def test_a_definition_that_needs_an_unknown_condition_to_survive_is_assumed():
    model = _model(
        """
for x in loader:
    h = a(x)
    if cast:
        h = h.float()
    loss = h.sum()
    loss.backward()
"""
    )
    flow = flow_of(model, model.steps[0])
    use = _sites(model, "loss")[0]
    kept, cast = _sites(model, "h")
    assert dict(reaching(flow, use, [kept, cast])) == {kept: ASSUMED, cast: PROVED}


def test_last_of_follows_paths_not_text():
    model = _model(
        """
for x in loader:
    scaler.scale(loss).backward()
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
"""
    )
    step = model.steps[0]
    flow = flow_of(model, step)
    a, b = step.of(EventKind.SCALER_STEP)
    assert last_of(flow, [b, a]) is b and first_of(flow, [b, a]) is a
    update = step.of(EventKind.SCALER_UPDATE)[0]
    later, proof = any_path(flow, a, [b, update])
    assert later == [b, update] and proof is PROVED


def test_a_region_site_and_in_iteration():
    model = _model(
        """
import torch
with torch.autocast("cuda"):
    warm = model(x)
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""
    )
    step = next(s for s in model.steps if s.loop is not None)
    flow = flow_of(model, step)
    backward = step.of(EventKind.BACKWARD)[0]
    outside, inside = model.scopes[0].regions
    assert not in_iteration(flow, Site(outside.node)) and in_iteration(flow, Site(inside.node))
    assert site_path(flow, Site(inside.node), backward) is PROVED
    assert site_path(flow, backward, Site(inside.node)) is None  # no back edge within one iteration


def test_again_in_loop_sees_the_break():
    model = _model(
        """
for x in loader:
    scaler.scale(loss).backward()
    for opt in optimizers:
        if has_grads(opt):
            scaler.step(opt)
            scaler.update()
            break
    for opt in optimizers:
        scaler.step(opt)
        scaler.update()
"""
    )
    step = model.steps[0]
    flow = flow_of(model, step)
    once, every = step.of(EventKind.SCALER_UPDATE)
    assert again_in_loop(flow, once, once.loops[-1]) is None
    assert again_in_loop(flow, every, every.loops[-1]) is PROVED


def test_scope_flow_reaches_from_the_function_start():
    model = _model(
        """
class Trainer:
    def step(self, closure=None):
        if self.scaler is None:
            closure = wrap(closure)
            return self.optimizer.step(closure)
        self.scaler.step(self.optimizer, closure)
"""
    )
    event = next(e for e in model.events if e.kind is EventKind.SCALER_STEP)
    flow = whole_scope_flow(model, event.scope)
    assert reaching(flow, event, _sites(model, "closure")) == []
