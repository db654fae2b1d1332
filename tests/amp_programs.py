"""A hypothesis strategy for AMP training scripts: correct ones, and ones with exactly one known bug.

Every generated program is a complete script that runs on CPU in a few seconds: a tiny model,
synthetic data, float16 CPU autocast and `GradScaler("cpu")`, three optimizer steps. Around that
fixed core the grammar varies what real training code varies:

- where the loop lives (module level, a `train(...)` function, a `Trainer.fit` method on `self.*`
  state, or a `train_step(...)` function called from the loop), an extra epoch loop, an `if` around
  the optimizer step, gradient accumulation with an `if (i + 1) % accum == 0:` boundary;
- how torch is spelled (`import torch`, `import torch as T`, `from torch import autocast`,
  `from torch.amp import GradScaler`, aliases) and how the device is passed;
- one or two optimizers (one scaler, one update), one or two losses, clipping (norm or value)
  after `scaler.unscale_`, AMP switched by `enabled=use_amp`;
- comments, trailing comments and blank lines sprinkled between the statements.

Then at most one bug is injected (`BUGS`). Each `Program` carries the rule codes amp-lint must report
for it (empty for a correct program) and, when the bug has a fix, the program `--fix` must produce,
up to comments and layout (`fixed_equivalent`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import FrozenSet, List, Optional, Tuple

from hypothesis import strategies as st

# The bugs, one per program, and the rule each one must trigger.
BUGS = (
    "AMP001",  # backward inside the autocast block
    "AMP010",  # float16 autocast, no GradScaler at all
    "AMP011",  # loss.backward() while the scaler steps
    "AMP020",  # optimizer.step() instead of scaler.step(optimizer)
    "AMP021",  # no scaler.update()
    "AMP022",  # scaler.update() before scaler.step(...)
    "AMP023",  # scaler.update() twice
    "AMP030",  # clipping without scaler.unscale_ first
    "AMP070",  # deprecated torch.cuda.amp.autocast
)
UNFIXABLE = frozenset({"AMP010"})  # reported only: adding a scaler is a numerics decision

IMPORT_STYLES = ("torch", "torch.amp", "torch as T", "from torch", "from torch.amp", "from torch.amp as")
DEVICE_STYLES = ("literal", "keyword", "device.type")
LEVELS = ("module", "function", "method", "step function")


@dataclass(frozen=True)
class Shape:
    """The choices that make one training script."""

    # Where the loop lives: "module", "function" (train(...)), "method" (Trainer.fit), or "step function"
    # (the iteration in train_step(...), called from a loop at module level).
    level: str = "module"
    epoch_loop: bool = False
    accumulate: bool = False
    guard_step: bool = False  # `if apply_updates:` around the optimizer step
    optimizers: int = 1
    losses: int = 1  # a second (auxiliary) loss: two scaled backward passes, the first with retain_graph
    clip: bool = False
    clip_kind: str = "norm"  # clip_grad_norm_ or clip_grad_value_
    switchable: bool = False  # `enabled=use_amp` on autocast and the scaler
    imports: str = "torch"
    device: str = "literal"
    set_to_none: bool = False
    bug: Optional[str] = None
    # Another form of the same bug: AMP001 the step inside autocast too, AMP011 a discarded
    # `scaler.scale(loss)`, AMP020 a double step, AMP023 two updates in a row, AMP070 a module alias.
    variant: bool = False
    # (line index, what) pairs: "blank", "comment:<text>" or "trailing:<text>"
    sprinkles: Tuple[Tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Program:
    source: str
    expected: FrozenSet[str]  # rule codes amp-lint must report, nothing more
    shape: Shape
    fixed_equivalent: Optional[str]  # what --fix must produce (compare ASTs); None when nothing is fixable

    @property
    def bug(self) -> Optional[str]:
        return self.shape.bug

    def __str__(self) -> str:  # hypothesis prints this for a failing example
        return f"# {self.shape}\n# expected: {sorted(self.expected)}\n{self.source}"


def expected_codes(shape: Shape) -> FrozenSet[str]:
    if shape.bug is None:
        return frozenset()
    if shape.bug == "AMP020" and shape.optimizers == 1 and not shape.clip and not shape.variant:
        # No scaler.step and no unscale_ left: update() has no inf checks to consume and raises
        # "No inf checks were recorded prior to update." (AMP022, its "never stepped" case).
        return frozenset({"AMP020", "AMP022"})
    return frozenset({shape.bug})


# --- rendering -----------------------------------------------------------------------------------


class _Names:
    """How this script spells each piece of the torch API."""

    def __init__(self, shape: Shape, autocast_spelling: str) -> None:
        style = shape.imports
        self.torch = "T" if style == "torch as T" else "torch"
        t = self.torch
        self.imports: List[str] = ["import torch as T" if style == "torch as T" else "import torch"]
        self.autocast = {"torch": "torch.autocast", "torch.amp": "torch.amp.autocast", "torch as T": "T.autocast"}.get(style)
        self.scaler_class = f"{t}.amp.GradScaler"
        clip = f"clip_grad_{shape.clip_kind}_"
        self.clip = f"{t}.nn.utils.{clip}"
        if style == "from torch":
            self.imports += ["from torch import autocast", f"from torch.nn.utils import {clip}"]
            self.autocast, self.clip = "autocast", clip
        elif style == "from torch.amp":
            self.imports += ["from torch.amp import GradScaler", "from torch.amp import autocast"]
            self.autocast, self.scaler_class = "autocast", "GradScaler"
        elif style == "from torch.amp as":
            self.imports += [
                "from torch.amp import GradScaler as AmpScaler",
                "from torch.amp import autocast as amp_autocast",
                f"from torch.nn.utils import {clip} as clip_gradients",
            ]
            self.autocast, self.scaler_class, self.clip = "amp_autocast", "AmpScaler", "clip_gradients"
        dtype = f"dtype={t}.float16"
        device = {"literal": '"cpu"', "keyword": 'device_type="cpu"', "device.type": "device.type"}[shape.device]
        self._call = f"{self.autocast}({device}, {dtype})"
        if autocast_spelling != "modern":
            # The deprecated CUDA spelling (AMP070), or what its fix must turn it into.
            deprecated = autocast_spelling == "deprecated"
            if shape.variant:  # through a module alias
                self.imports.append("import torch.cuda.amp as amp_module" if deprecated else "import torch.amp as amp_module")
                self._call = f"amp_module.autocast({dtype})" if deprecated else f'amp_module.autocast("cuda", {dtype})'
            elif self.autocast.endswith(".autocast"):  # spelled through the torch module
                self._call = f"{t}.cuda.amp.autocast({dtype})" if deprecated else f'{t}.amp.autocast("cuda", {dtype})'
            else:  # spelled through an imported name
                module = "torch.cuda.amp" if deprecated else "torch.amp"
                alias = f" as {self.autocast}" if self.autocast != "autocast" else ""
                self.imports = [line for line in self.imports if not line.endswith(f"import autocast{alias}")]
                self.imports.append(f"from {module} import autocast{alias}")
                self._call = f"{self.autocast}({dtype})" if deprecated else f'{self.autocast}("cuda", {dtype})'


    def autocast_call(self, switchable: bool) -> str:
        return self._call[:-1] + ", enabled=use_amp)" if switchable else self._call


def _lines(shape: Shape, autocast_spelling: str) -> List[Tuple[int, str]]:
    """The script as (indent level, text) pairs, bug included."""
    names = _Names(shape, autocast_spelling)
    t = names.torch
    bug = shape.bug
    optimizer_names = ["optimizer"] if shape.optimizers == 1 else ["opt0", "opt1"]

    out: List[Tuple[int, str]] = [(0, line) for line in names.imports]
    out.append((0, ""))
    out.append((0, f"{t}.manual_seed(0)"))
    if shape.device == "device.type":
        out.append((0, f'device = {t}.device("cpu")'))
    if shape.switchable:
        out.append((0, "use_amp = True"))
    out.append((0, f"model = {t}.nn.Sequential({t}.nn.Linear(4, 8), {t}.nn.ReLU(), {t}.nn.Linear(8, 2))"))
    if shape.optimizers == 1:
        out.append((0, f"optimizer = {t}.optim.SGD(model.parameters(), lr=0.01)"))
    else:
        out.append((0, f"opt0 = {t}.optim.SGD(model[0].parameters(), lr=0.01)"))
        out.append((0, f"opt1 = {t}.optim.Adam(model[2].parameters(), lr=0.001)"))
    out.append((0, f"loss_fn = {t}.nn.MSELoss()"))
    batches = 6 if shape.accumulate else 3  # three optimizer steps either way
    out.append((0, f"loader = [({t}.randn(8, 4), {t}.randn(8, 2)) for _ in range({batches})]"))
    if shape.accumulate:
        out.append((0, "accum = 2"))
    if shape.guard_step:
        out.append((0, "apply_updates = True"))

    # In a method, the training state lives on `self`.
    this = "self." if shape.level == "method" else ""
    scaler = f"{this}scaler"
    # The scaler's device follows autocast's: the deprecated spelling is CUDA's (else AMP014 fires too).
    scaler_device = '"cpu"' if autocast_spelling == "modern" else '"cuda"'
    scaler_arguments = scaler_device + (", enabled=use_amp" if shape.switchable else "")
    make_scaler = [] if bug == "AMP010" else [f"{scaler} = {names.scaler_class}({scaler_arguments})"]
    arguments = ", ".join(["model", "loader"] + optimizer_names)
    batch = "i, (x, y)" if shape.accumulate else "x, y"
    batches = f"enumerate({this}loader)" if shape.accumulate else f"{this}loader"
    iteration = _iteration(shape, names, this)

    def loops(level: int, body: List[Tuple[int, str]]) -> List[Tuple[int, str]]:
        lines = []
        if shape.epoch_loop:
            lines.append((level, "for epoch in range(1):"))
            level += 1
        lines.append((level, f"for {batch} in {batches}:"))
        return lines + [(level + 1 + line_level, code) for line_level, code in body]

    if shape.level == "module":
        out += [(0, line) for line in make_scaler]
        out += loops(0, iteration)
    elif shape.level == "function":
        out += [(0, ""), (0, f"def train({arguments}):")]
        out += [(1, line) for line in make_scaler]
        out += loops(1, iteration)
        out += [(0, ""), (0, f"train({arguments})")]
    elif shape.level == "method":
        out += [(0, ""), (0, "class Trainer:")]
        out.append((1, f"def __init__(self, {arguments}):"))
        out += [(2, f"self.{name} = {name}") for name in ["model", "loader"] + optimizer_names]
        out += [(2, line) for line in make_scaler]
        out += [(0, ""), (1, "def fit(self):")]
        out += loops(2, iteration)
        out += [(0, ""), (0, f"Trainer({arguments}).fit()")]
    else:  # "step function": one iteration per call, the loop at module level
        step_arguments = ", ".join(
            ["model", "x", "y"] + optimizer_names + ([] if bug == "AMP010" else ["scaler"]) + (["i"] if shape.accumulate else [])
        )
        out += [(0, ""), (0, f"def train_step({step_arguments}):")]
        out += [(1 + line_level, code) for line_level, code in iteration]
        out.append((0, ""))
        out += [(0, line) for line in make_scaler]
        out += loops(0, [(0, f"train_step({step_arguments})")])
    return out


def _iteration(shape: Shape, names: _Names, this: str) -> List[Tuple[int, str]]:
    """One training iteration, at relative indent levels."""
    bug = shape.bug
    model, scaler = f"{this}model", f"{this}scaler"
    optimizers = [this + name for name in (["optimizer"] if shape.optimizers == 1 else ["opt0", "opt1"])]
    out: List[Tuple[int, str]] = []
    level = 0
    zero_grad = [f"{o}.zero_grad({'set_to_none=True' if shape.set_to_none else ''})" for o in optimizers]
    if not shape.accumulate:
        out += [(level, line) for line in zero_grad]
    out.append((level, f"with {names.autocast_call(shape.switchable)}:"))
    out.append((level + 1, f"out = {model}(x)"))
    out.append((level + 1, "loss = loss_fn(out, y)"))
    losses = ["loss"]
    if shape.losses == 2:
        out.append((level + 1, "aux = out.pow(2).mean() * 0.01"))
        losses.append("aux")
    if shape.accumulate:
        out += [(level + 1, f"{loss} = {loss} / accum") for loss in losses]
    for index, loss in enumerate(losses):
        argument = "retain_graph=True" if index < len(losses) - 1 else ""
        plain = bug == "AMP010" or (bug == "AMP011" and index == 0)
        if plain and bug == "AMP011" and shape.variant:
            out.append((level, f"{scaler}.scale({loss})"))  # the scaled loss is thrown away
        backward = f"{loss}.backward({argument})" if plain else f"{scaler}.scale({loss}).backward({argument})"
        out.append((level + 1 if bug == "AMP001" else level, backward))
    after_backward = len(out)
    if shape.accumulate:
        out.append((level, "if (i + 1) % accum == 0:"))
        level += 1
    if shape.guard_step:
        out.append((level, "if apply_updates:"))
        level += 1
    if bug == "AMP022":
        out.append((level, f"{scaler}.update()"))
    if shape.clip:
        if bug not in ("AMP010", "AMP030"):
            out += [(level, f"{scaler}.unscale_({o})") for o in optimizers]
        out.append((level, f"{names.clip}({model}.parameters(), 1.0)"))
    for index, optimizer in enumerate(optimizers):
        if bug == "AMP020" and index == 0 and shape.variant:  # a double step
            out += [(level, f"{scaler}.step({optimizer})"), (level, f"{optimizer}.step()")]
            continue
        plain = bug == "AMP010" or (bug == "AMP020" and index == 0)
        out.append((level, f"{optimizer}.step()" if plain else f"{scaler}.step({optimizer})"))
        if bug == "AMP023" and index == 0 and not shape.variant:  # once per optimizer
            out.append((level, f"{scaler}.update()"))
    if bug not in ("AMP010", "AMP021", "AMP022"):
        out.append((level, f"{scaler}.update()"))
    if bug == "AMP023" and shape.variant:  # twice in a row
        out.append((level, f"{scaler}.update()"))
    if shape.accumulate:
        out += [(level, line) for line in zero_grad]
    if bug == "AMP001" and shape.variant:
        # The step sits in the autocast block too, as in many a first AMP port.
        out[after_backward:] = [(line_level + 1, code) for line_level, code in out[after_backward:]]
    return out


def _render(lines: List[Tuple[int, str]], sprinkles: Tuple[Tuple[int, str], ...] = ()) -> str:
    lines = list(lines)
    # Insert from the bottom up, so that earlier positions stay valid.
    for position, what in sorted(sprinkles, key=lambda item: -item[0]):
        position %= len(lines) + 1
        kind, _, text = what.partition(":")
        if kind == "trailing":
            index = min(position, len(lines) - 1)
            level, code = lines[index]
            if code:
                lines[index] = (level, f"{code}  # {text}")
        else:
            level = lines[position][0] if position < len(lines) else 0
            lines.insert(position, (level, f"# {text}" if kind == "comment" else ""))
    return "".join(("    " * level + code).rstrip() + "\n" if code else "\n" for level, code in lines)


def build(shape: Shape) -> Program:
    spelling = "deprecated" if shape.bug == "AMP070" else "modern"
    source = _render(_lines(shape, spelling), shape.sprinkles)
    if shape.bug in UNFIXABLE:
        fixed_equivalent = None
    elif shape.bug == "AMP070":
        fixed_equivalent = _render(_lines(replace(shape, bug=None), "fixed"))
    else:
        fixed_equivalent = _render(_lines(replace(shape, bug=None), "modern"))
    return Program(source, expected_codes(shape), shape, fixed_equivalent)


# --- the strategy -------------------------------------------------------------------------------------

_COMMENTS = (
    "forward pass",
    "TODO: tune the learning rate",
    "step",
    "",
    "ünïcödé ✓ comment",
    "note: 'quotes' and \"double quotes\"",
    "scaler.update() is called below",  # API names in comments mean nothing
)

sprinkle = st.tuples(
    st.integers(min_value=0, max_value=60),
    st.one_of(
        st.just("blank"),
        st.sampled_from(_COMMENTS).map(lambda text: "comment:" + text),
        st.sampled_from(_COMMENTS).map(lambda text: "trailing:" + text),
    ),
)


@st.composite
def shapes(draw, bug=st.sampled_from((None,) + BUGS)) -> Shape:
    chosen_bug = draw(bug) if isinstance(bug, st.SearchStrategy) else bug
    return Shape(
        level=draw(st.sampled_from(LEVELS)),
        epoch_loop=draw(st.booleans()),
        accumulate=draw(st.booleans()),
        guard_step=draw(st.booleans()),
        optimizers=draw(st.sampled_from((1, 2))),
        losses=draw(st.sampled_from((1, 2))),
        clip=chosen_bug == "AMP030" or draw(st.booleans()),  # AMP030 needs a clip to be wrong
        clip_kind=draw(st.sampled_from(("norm", "value"))),
        imports=draw(st.sampled_from(IMPORT_STYLES)),
        device=draw(st.sampled_from(DEVICE_STYLES)),
        set_to_none=draw(st.booleans()),
        # A scaler switched on at run time may be off: amp-lint rightly does not claim one is missing.
        switchable=chosen_bug != "AMP010" and draw(st.booleans()),
        bug=chosen_bug,
        variant=draw(st.booleans()),
        sprinkles=tuple(draw(st.lists(sprinkle, max_size=6))),
    )


def programs(bug=st.sampled_from((None,) + BUGS)) -> st.SearchStrategy:
    """Programs with the given bug (a code, None for correct programs, or a strategy of either)."""
    return shapes(bug).map(build)


def correct_programs() -> st.SearchStrategy:
    return programs(None)


def buggy_programs() -> st.SearchStrategy:
    return programs(st.sampled_from(BUGS))


def one_program_per_kind() -> st.SearchStrategy:
    """A correct program and one program per bug, drawn together (to run them in one interpreter)."""
    return st.tuples(*[programs(kind) for kind in (None,) + BUGS])
