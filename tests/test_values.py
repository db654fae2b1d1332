"""The value resolver (amp_lint.analysis.values): what device strings, devices, dtypes and flags may be.

Each test resolves the argument of the one `use(...)` call of a snippet, in the function that holds it.
The shapes are our own code; where a shape comes from a real bug, its origin is in a comment.
"""

from __future__ import annotations

import textwrap
from typing import Optional

import libcst as cst
import pytest

from amp_lint.analysis import values
from amp_lint.analysis.value_types import Index, Kind


def _resolve(source: str) -> values.Value:
    module = cst.parse_module(textwrap.dedent(source))
    found = []

    class Find(cst.CSTVisitor):
        def __init__(self) -> None:
            self.functions = []

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.functions.append(node)

        def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.functions.pop()

        def visit_Call(self, node: cst.Call) -> None:
            if isinstance(node.func, cst.Name) and node.func.value == "use":
                found.append((node.args[0].value, self.functions[-1] if self.functions else None))

    module.visit(Find())
    assert len(found) == 1, "one use(...) per snippet"
    expression, scope = found[0]
    return values.of(module).resolve(expression, scope)


def _literals(source: str) -> Optional[tuple]:
    return _resolve(source).literals


# --- literals through names ----------------------------------------------------------------------------


def test_module_constant():
    assert _literals('DEVICE = "cuda:0"\ndef f():\n    use(DEVICE)\n') == ("cuda:0",)


def test_local_name_and_copy():
    value = _resolve(
        """
        def f():
            d = "cuda:1"
            e = d
            use(e)
        """
    )
    assert value.literals == ("cuda:1",)
    assert value.device_type == "cuda" and value.indexed()


def test_later_assignment_in_the_body_replaces_the_earlier_one():
    assert _literals('def f():\n    d = "cuda:0"\n    d = "cpu"\n    use(d)\n') == ("cpu",)


def test_assignment_after_the_use_does_not_reach_it():
    assert _literals('def f():\n    d = "cuda:0"\n    use(d)\n    d = "cpu"\n') == ("cuda:0",)


def test_conditional_assignments_are_alternatives():
    value = _resolve(
        """
        def f(flag):
            d = "cuda:0"
            if flag:
                d = "cpu"
            use(d)
        """
    )
    assert set(value.literals) == {"cuda:0", "cpu"}


def test_last_unconditional_module_binding_wins_in_functions():
    assert _literals('D = "cuda:0"\nD = "cuda"\ndef f():\n    use(D)\n') == ("cuda",)


def test_parameter_is_unknown():
    assert not _resolve("def f(device):\n    use(device)\n").known


def test_parameter_rebound_before_the_use():
    value = _resolve("import torch\ndef f(device):\n    device = torch.device(device)\n    use(device)\n")
    assert value.kind is Kind.DEVICE and value.certain


def test_parameter_annotated_as_a_device():
    value = _resolve("import torch\ndef f(device: torch.device):\n    use(device)\n")
    assert value.kind is Kind.DEVICE and value.atoms[0].index is Index.MAYBE


def test_for_target_import_and_augmented_assignment_are_not_followed():
    assert not _resolve('def f(xs):\n    d = "cuda:0"\n    for d in xs:\n        pass\n    use(d)\n').known
    assert not _resolve('from config import DEVICE\ndef f():\n    use(DEVICE)\n').known
    assert not _resolve('def f():\n    d = "cuda"\n    d += ":0"\n    use(d)\n').known


def test_global_written_by_a_function_is_unknown():
    source = """
        D = "cuda:0"
        def configure(d):
            global D
            D = d
        def f():
            use(D)
        """
    assert not _resolve(source).known


def test_walrus_in_a_test_is_a_binding():
    assert not _resolve('def f():\n    d = "cuda:0"\n    if (d := pick()):\n        use(d)\n').known


def test_builtin_str_shadowed():
    value = _resolve('import torch\ndef str(x):\n    return "cpu"\ndef f():\n    use(str(torch.device("cuda:0")))\n')
    assert value.literals == ("cpu",)  # the file's own str(), resolved as a helper


# --- devices --------------------------------------------------------------------------------------------


def test_str_of_a_tensor_device_may_carry_an_index():
    # RoMa #56: `dt = str(x.device)` reaches autocast.
    value = _resolve("def f(x):\n    dt = str(x.device)\n    use(dt)\n")
    atom = value.atoms[0]
    assert atom.kind is Kind.STRING and atom.stringified and atom.index is Index.MAYBE and not atom.certain


def test_torch_device_with_an_index():
    value = _resolve('import torch\ndef f():\n    use(str(torch.device("cuda", 1)))\n')
    assert value.kind is Kind.STRING and value.atoms[0].index is Index.YES and value.device_type == "cuda"


def test_device_type_has_no_index():
    value = _resolve('import torch\ndev = torch.device("cuda:0")\ndef f():\n    use(dev.type)\n')
    assert value.literals == ("cuda",) and value.no_index


def test_tensor_device_type_has_no_index():
    value = _resolve("def f(x):\n    use(x.device.type)\n")
    assert value.no_index and not value.certain


def test_settings_device_is_unknown():
    assert not _resolve("def f(args):\n    use(args.device)\n").known
    assert not _resolve("class A:\n    def f(self):\n        use(self.device)\n").known


def test_cuda_fallback_is_noted():
    # Open-Rig3R #35: `torch.device("cuda" if torch.cuda.is_available() else "cpu")`, then str(device).
    value = _resolve(
        """
        import torch
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        def f():
            use(str(device))
        """
    )
    assert value.device_types() == {"cuda", "cpu"}
    assert value.device_types(with_cuda=True) == {"cuda"}
    assert value.no_index


def test_cuda_fallback_in_statements():
    value = _resolve(
        """
        import torch
        if torch.cuda.is_available():
            device = "cuda"
        else:
            device = "cpu"
        def f():
            use(device)
        """
    )
    assert value.device_types(with_cuda=True) == {"cuda"}


def test_fstring_and_concatenation_carry_an_index():
    for code in ('f"cuda:{rank}"', '"cuda:" + str(rank)', '"cuda:{}".format(rank)', '"cuda:%d" % rank'):
        value = _resolve(f"def f(rank):\n    use({code})\n")
        assert value.kind is Kind.STRING and value.atoms[0].index is Index.YES, code
        assert value.device_type == "cuda", code


def test_split_gives_the_device_type():
    value = _resolve('def f():\n    d = "cuda:0"\n    use(d.split(":")[0])\n')
    assert value.literals == ("cuda",) and value.no_index


# --- attributes set in __init__ ---------------------------------------------------------------------------


def test_attribute_set_in_init():
    # index-tts #117: `self.device = "cuda:0"` in __init__, autocast(self.device) in another method.
    value = _resolve(
        """
        class TTS:
            def __init__(self):
                self.device = "cuda:0"
            def infer(self):
                use(self.device)
        """
    )
    assert value.literals == ("cuda:0",)


def test_attribute_from_a_parameter_is_an_unknown_alternative():
    value = _resolve(
        """
        import torch
        class TTS:
            def __init__(self, device=None):
                if device is not None:
                    self.device = device
                elif torch.cuda.is_available():
                    self.device = "cuda:0"
                else:
                    self.device = "cpu"
            def infer(self):
                use(self.device)
        """
    )
    assert not value.known
    assert [a.literal for a in value.indexed()] == ["cuda:0"]


def test_attribute_written_from_outside_is_unknown():
    source = """
        class A:
            def __init__(self):
                self.device = "cuda:0"
            def f(self):
                use(self.device)
        a = A()
        a.device = "cpu"
        """
    assert not _resolve(source).known


def test_attribute_set_in_a_base_or_subclass_of_the_file():
    source = """
        class Base:
            def __init__(self):
                self.device = "cuda:0"
        class Child(Base):
            def f(self):
                use(self.device)
        class Other(Child):
            def __init__(self):
                self.device = "cpu"
        """
    assert set(_resolve(source).literals) == {"cuda:0", "cpu"}


def test_property_returns():
    source = """
        import torch
        class A:
            @property
            def device(self):
                return torch.device("cuda:0")
            def f(self):
                use(self.device)
        """
    value = _resolve(source)
    assert value.kind is Kind.DEVICE and value.indexed()


def test_property_with_a_setter_is_unknown():
    source = """
        class A:
            @property
            def device(self):
                return "cuda:0"
            @device.setter
            def device(self, value):
                self._device = value
            def f(self):
                use(self.device)
        """
    assert not _resolve(source).known


def test_dataclass_field_is_unknown():
    source = """
        from dataclasses import dataclass
        @dataclass
        class Cfg:
            device = "cuda:0"
            def f(self):
                use(self.device)
        """
    assert not _resolve(source).known


def test_attribute_dtype():
    source = """
        import torch
        class A:
            def __init__(self, fp16):
                self.dtype = torch.float16 if fp16 else torch.bfloat16
            def f(self):
                use(self.dtype)
        """
    assert set(_resolve(source).literals) == {"torch.float16", "torch.bfloat16"}


# --- subscripts and helpers ------------------------------------------------------------------------------


def test_dict_literal_entry():
    value = _resolve('import torch\nctx = {"dev": torch.device("cuda:0")}\ndef f():\n    use(str(ctx["dev"]))\n')
    assert value.literals == ("cuda:0",) and value.certain


def test_dict_entry_assigned_later_is_an_alternative():
    source = 'def f():\n    ctx = {"dev": "cuda:0"}\n    ctx["dev"] = "cpu"\n    use(ctx["dev"])\n'
    assert set(_resolve(source).literals) == {"cuda:0", "cpu"}


@pytest.mark.parametrize("escape", ["ctx.update(other)", "configure(ctx)", "alias = ctx", "ctx[key] = 1"])
def test_dict_that_escapes_is_unknown(escape):
    source = f'def f(other, key):\n    ctx = {{"dev": "cuda:0"}}\n    {escape}\n    use(ctx["dev"])\n'
    assert not _resolve(source).known


def test_helper_returning_str_of_a_device():
    # SeedVR2: a helper of the file returns `str(device)`.
    source = """
        import torch
        device = torch.device("cuda:0")
        def get_device():
            return str(device)
        def f():
            use(get_device())
        """
    value = _resolve(source)
    assert value.literals == ("cuda:0",) and value.atoms[0].stringified


def test_helper_that_may_fall_off_the_end_returns_none_too():
    source = 'def pick(flag):\n    if flag:\n        return "cuda:0"\ndef f():\n    use(pick(True))\n'
    assert {a.kind for a in _resolve(source).atoms} == {Kind.STRING, Kind.NONE}


def test_helper_with_unknown_return_and_generator():
    assert not _resolve("def g():\n    return settings.device\ndef f():\n    use(g())\n").known
    assert not _resolve('def g():\n    yield "cuda:0"\ndef f():\n    use(g())\n').known


def test_method_returns():
    source = """
        class A:
            def get_device(self):
                return "cuda:0"
            def f(self):
                use(self.get_device())
        """
    assert _literals(source) == ("cuda:0",)


# --- dtypes and flags -----------------------------------------------------------------------------------


def test_dtype_alias_and_getattr():
    assert _literals("import torch as T\nAMP = T.float16\ndef f():\n    use(AMP)\n") == ("torch.float16",)
    assert _literals('import torch\ndef f():\n    use(getattr(torch, "bfloat16"))\n') == ("torch.bfloat16",)


def test_flags():
    assert _literals("USE_AMP = False\ndef f():\n    use(USE_AMP)\n") == (False,)
    assert _literals("USE_AMP = False\ndef f():\n    use(not USE_AMP)\n") == (True,)
    value = _resolve("def f(a, b):\n    use(a == b)\n")
    assert value.kind is Kind.BOOL and value.literals is None


def test_cycles_and_depth_are_unknown():
    assert not _resolve("def f():\n    d = d\n    use(d)\n").known
    chain = "\n".join(f"d{i} = d{i + 1}" for i in range(30))
    assert not _resolve(f"{chain}\nd30 = 'cuda:0'\ndef f():\n    use(d0)\n").known


def test_index_is_built_once_per_module():
    module = cst.parse_module("x = 1\n")
    assert values.of(module) is values.of(module)
    assert values.of(cst.parse_module("x = 1\n")) is not values.of(module)


# --- star imports (names.NameTable) ------------------------------------------------------------------------

from amp_lint.analysis.names import NameTable  # noqa: E402
from amp_lint.engine.checker import Checker  # noqa: E402
from amp_lint.parse.prefilter import Prefilter  # noqa: E402
from amp_lint.rules import ALL_RULES  # noqa: E402


def _table(source: str) -> NameTable:
    table = NameTable()
    for statement in cst.parse_module(source).body:
        for small in getattr(statement, "body", ()):
            if isinstance(small, cst.ImportFrom):
                table.bind_import_from(small)
            elif isinstance(small, cst.Import):
                table.bind_import(small)
    return table


def test_star_import_of_a_torch_module_binds_its_amp_names():
    table = _table("from torch.cuda.amp import *\n")
    assert table.lookup("autocast") == "torch.cuda.amp.autocast"
    assert table.lookup("GradScaler") == "torch.cuda.amp.GradScaler"
    assert table.lookup("something_else") is None


def test_star_import_of_another_module_binds_only_torch():
    table = _table("from common import *\n")
    assert table.lookup("torch") == "torch"
    assert table.lookup("autocast") is None  # whose autocast? not conclusive


def test_star_import_of_another_module_may_replace_torch_names():
    table = _table("from torch.cuda.amp import *\nfrom helpers import *\n")
    assert table.lookup("autocast") is None
    assert table.lookup("torch") == "torch"


def test_explicit_bindings_win_over_star_imports():
    table = _table("from common import *\nimport numpy as torch\n")
    assert table.lookup("torch") == "numpy"
    table = _table("from torch.cuda.amp import *\n")
    table.bind_local("autocast")
    assert table.lookup("autocast") is None


_PADDING = "\n".join(f"# filler line {i} to pass the prefilter's small-file shortcut" for i in range(90))


def _check(source: str):
    return Checker(frozenset(rule.code for rule in ALL_RULES if rule.default_enabled)).check(source, "train.py")


def test_file_that_gets_torch_through_a_star_import_is_analysed():
    source = f'''from common import *

{_PADDING}
def train(model, loader, optimizer):
    for x in loader:
        with torch.cuda.amp.autocast():
            loss = model(x).sum()
        loss.backward()
        optimizer.step()
'''
    assert len(source) > 4000
    assert Prefilter(ALL_RULES).may_match(source)
    codes = sorted(d.code for d in _check(source).diagnostics)
    assert codes == ["AMP010", "AMP070"]


def test_autocast_from_a_torch_star_import_is_analysed():
    source = f'''from torch.cuda.amp import *

{_PADDING}
scaler = GradScaler()
def train(model, loader, optimizer):
    for x in loader:
        with autocast():
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
'''
    assert Prefilter(ALL_RULES).may_match(source)
    codes = sorted(d.code for d in _check(source).diagnostics)
    assert codes == ["AMP070", "AMP072"]


def test_autocast_from_an_unknown_star_import_is_not_torch():
    source = f'''from helpers import *

{_PADDING}
def train(model, loader, optimizer):
    for x in loader:
        with autocast():
            loss = model(x).sum()
        loss.backward()
        optimizer.step()
'''
    assert _check(source).diagnostics == []


def test_names_of_a_lambda_or_comprehension_are_not_the_function_s():
    assert not _resolve('device = "cuda:0"\ndef f(devices):\n    return [use(device) for device in devices]\n').known
    assert not _resolve('device = "cuda:0"\ndef f():\n    return lambda device: use(device)\n').known


def test_annotated_class_attribute_is_a_field():
    source = """
        class Cfg(BaseSettings):
            device: str = "cuda:0"
            def f(self):
                use(self.device)
        """
    assert not _resolve(source).known


def test_device_with_keyword_index():
    value = _resolve('import torch\ndef f(i):\n    use(torch.device(index=i, type="cuda"))\n')
    assert value.kind is Kind.DEVICE and value.atoms[0].index is Index.YES
