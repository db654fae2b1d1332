"""The cheaper parses of parts of a module must read what the whole module's parse reads:

- `outline` (the project index's facts, a scaler factory's function, a module's classes): the function
  bodies hollowed, everything else as in the whole parse;
- `logical_lines` (the prefilter's keys): the statements on some lines, each alone, hold the names the
  whole module's statements on those lines hold, in the positions `code_identifiers` reads;
- `code_text.without_strings_and_comments`, which both read lines and brackets from.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from amp_lint.analysis import project
from amp_lint.parse import outline as outline_module
from amp_lint.parse import prefilter, python_ast
from amp_lint.parse.code_text import without_strings_and_comments
from amp_lint.parse.logical_lines import statements_on
from amp_lint.parse.outline import outline
from amp_lint.rules import ALL_RULES

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").rglob("*.py"))

# The shapes a line reader gets wrong: signatures over lines, one-line bodies, decorators with arguments
# over lines, a backslash ended by a string alone, strings that span lines (raw, f-, prefixed, with
# `def` at column 0 inside), brackets in strings and comments, nested functions, methods, `if`/`try`
# blocks at module level, `async def`, a body that ends with a multi-line string.
TRICKY = '''\
"""Module doc.
def not_a_function(x):
    return x
"""
import os
from typing import (
    Dict,  # )
    List,
)

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


@decorator(
    lambda f: [g for g in f if g],
)
def first(a: "List[int]",
          b: Dict[str, int] = {"(": 1},
) -> Dict[str, int]:
    value = f"""{a}
def inside_a_string(): pass
"""
    if value:
        return {"x": (1,
2)}
    assert isinstance(a, list), \\
        'a list, please'
    return b


def one_liner(x): return x + 1


async def coroutine(x) -> "torch.device":
    async with x as y:
        await y
    def nested():
        return r"""raw \\
still the string"""
    return nested


class Model(Base, metaclass=Meta):
    attribute: int = 3
    other = [
        1,
    ]

    @property
    def device(self) -> "torch.device":
        return self._device

    def build(self):
        self.scaler = torch.amp.GradScaler("cuda")
        return """trailing
string"""

    if torch is not None:
        def conditional(self):
            pass


if __name__ == "__main__":
    first([1], {})
'''


def _padded(text: str) -> str:
    body = "".join(f"    total = total * value + {step}\n" for step in range(4))
    return text + "".join(f"\ndef padding_{i}(value):\n    total = {i}\n{body}    return total\n" for i in range(400))


def _texts():
    return [TRICKY, *(path.read_text(encoding="utf-8") for path in FIXTURES)]


def test_without_strings_and_comments_keeps_lines_and_columns():
    text = 'x = f(")")  # (\nY = """a\nb("""  + g(\n  1)\n'
    structure = without_strings_and_comments(text)
    assert structure.count("\n") == text.count("\n")
    lines = structure.split("\n")
    assert lines[0] == "x = f(   )  "  # a string blanked in place, the comment gone
    assert lines[1] == "Y = \\" and lines[2].startswith("~~~~~  + g(")  # a string over lines: `\\`, then `~`s
    assert lines[3] == "  1)"


@pytest.mark.parametrize("index", range(0, len(FIXTURES) + 1, 7))
def test_the_outline_has_the_facts_of_the_whole_module(index):
    text = _padded(_texts()[index])
    hollowed = outline(text)
    assert hollowed is not None and hollowed.count("\n") == text.count("\n")
    tree = ast.parse(hollowed)
    python_ast.forget()
    assert project.read_module_facts(text, "m", "m.py", "", False) == _facts_of_the_whole(text)
    assert ast.dump(tree).count("FunctionDef") == ast.dump(ast.parse(text)).count("FunctionDef") - _nested(text)


def _facts_of_the_whole(text: str):
    python_ast.forget()
    python_ast.parse(text)  # kept: the facts read the whole tree, as for the checked file
    try:
        return project.read_module_facts(text, "m", "m.py", "", False)
    finally:
        python_ast.forget()


def _nested(text: str) -> int:
    """Functions inside other functions' bodies: the outline hollows them with the body."""
    count = 0
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += sum(isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)) for inner in ast.walk(node)) - 1
    return count


def test_the_outline_hollows_bodies_and_keeps_headers_classes_and_module_code():
    hollowed = outline(_padded(TRICKY))
    assert "def inside_a_string" not in hollowed.split('"""Module doc.')[1]  # a body's string went with the body
    assert "self.scaler" not in hollowed and "def nested" not in hollowed and "total = total" not in hollowed
    for kept in ("import torch", "torch = None", "@decorator(", ") -> Dict[str, int]:", "def one_liner(x): return x + 1",
                 "class Model(Base, metaclass=Meta):", "attribute: int = 3", "@property", "def conditional(self):",
                 'first([1], {})'):  # fmt: skip
        assert kept in hollowed, kept
    tree = ast.parse(hollowed)
    model = next(node for node in tree.body if isinstance(node, ast.ClassDef))
    assert [n.name for n in model.body if isinstance(n, ast.FunctionDef)] == ["device", "build"]


def test_methods_false_keeps_the_classes_whole_and_keep_keeps_one_function():
    text = _padded(TRICKY)
    whole = ast.parse(text)
    classes = ast.parse(outline(text, methods=False))
    assert [ast.dump(n) for n in classes.body if isinstance(n, ast.ClassDef)] == [
        ast.dump(n) for n in whole.body if isinstance(n, ast.ClassDef)
    ]
    kept = ast.parse(outline(text, keep=("first",)))
    pick = lambda tree: [ast.dump(n) for n in tree.body if getattr(n, "name", "") == "first"]  # noqa: E731
    assert pick(kept) == pick(whole)
    assert "return b" in outline(text, keep=("first",)) and "return b" not in outline(text)


def test_the_outline_declines_small_savings_and_cr_line_breaks():
    assert outline(TRICKY) is None or outline(TRICKY).count("\n") == TRICKY.count("\n")
    assert outline("x = 1\n" * 5000) is None  # nothing to hollow
    assert outline(_padded(TRICKY).replace("\n", "\r\n")) is None
    # Below the size where it pays, the module is parsed whole (and kept, as before).
    python_ast.forget()
    assert outline_module.parse(TRICKY) is python_ast.parse(TRICKY)
    python_ast.forget()


# --- logical_lines --------------------------------------------------------------------------------

HINTS = ("autocast", "caler", "step", "backward", "amp", "enabled", "torch", "device", "grad")
FACTS = {"autocast_applied", "autocast_twice", "autocast_second_positional", "autocast_bool_arg",
         "autocast_dtype_arg", "autocast_device_missing", "autocast_device_indexed", "autocast_device_call",
         "autocast_device_object", "autocast_device_expr", "autocast_device_splat", "autocast_bare_decorator",
         "manual_grad_update"}  # fmt: skip


def _read(identifiers: str, hints):
    return {name for name in identifiers.split() if name in FACTS or any(hint in name for hint in hints)}


def test_the_statements_on_the_lines_hold_what_the_whole_parse_reads_there():
    for text in _texts():
        tree = ast.parse(text)
        for hint in HINTS:
            hints = (hint, "autocast")  # "autocast" lines always: the facts about autocast calls come from them
            lines = prefilter._lines_with(text, hints)
            statements = statements_on(text, lines)
            assert statements is not None
            whole = prefilter.code_identifiers(tree, lines)
            alone = prefilter.code_identifiers(ast.parse(statements), some_lines=True)
            assert _read(alone, hints) == _read(whole, hints), (hint, text[:300])


def test_statements_stand_alone_clauses_decorators_and_continuations():
    text = (
        "if a:\n    pass\nelif torch.autocast('cuda'):\n    pass\nelse: x = torch.autocast\n"
        "try:\n    pass\nexcept torch.autocast as error: pass\n"
        "@torch.autocast(\n    'cuda',\n)\ndef f(): pass\n"
        "y = torch.autocast(\n'cuda', dtype=torch.float16)  # )\n"
        "z = 1 + \\\n    torch.autocast\n"
        "with torch.autocast('cpu'):\n    pass\n"
    )
    module = statements_on(text, prefilter._lines_with(text, ("autocast",)))
    tree = ast.parse(module)
    assert "if torch.autocast('cuda'):" in module and "try: pass" in module and " x = torch.autocast" in module
    ids = prefilter.code_identifiers(tree, some_lines=True).split()
    assert {"autocast_dtype_arg", "autocast_twice", "y", "z", "x"} <= set(ids)


def test_statements_on_refuses_what_it_cannot_read_alone():
    assert statements_on("match x:\n    case torch.autocast():\n        pass\n", [2]) is None
    assert statements_on("x = (\n  torch.autocast\n", [2]) is None  # never ends: no Python
    assert statements_on("x = torch.autocast\r\n", [1]) is None
    assert statements_on("x = 1\n", []) == ""


def test_the_keys_decide_as_the_whole_parse_does_on_every_fixture(monkeypatch):
    """Over every fixture and its variants with the AMP names out of the read positions, with both steps
    and the keys run whatever the size: the second step decides as it does without the keys, for the
    default rules and for all of them."""
    monkeypatch.setattr(prefilter, "_SECOND_STEP_MIN_CHARS", 0)
    # Without the shortcut for names plainly in use, so that the statements decide every file.
    monkeypatch.setattr(prefilter, "_in_use_on_sight", lambda text, hints: False)
    for rules in (ALL_RULES, [rule for rule in ALL_RULES if not rule.preview]):
        checker = prefilter.Prefilter([rule for rule in rules if rule.needs])  # a rule without needs keeps every file
        ruled_out = 0
        for text in _texts() + _unread_variants():
            decided = []
            for keys_from in (0, 10**12):
                monkeypatch.setattr(prefilter, "_KEYS_MIN_CHARS", keys_from)
                python_ast.forget()
                decided.append(checker.may_match(text))
            assert decided[0] == decided[1], text[:300]
            ruled_out += not decided[0]
        assert ruled_out >= 20  # the keys rule files out here, not only let them through
    python_ast.forget()


_KEY_WORDS = re.compile(r"autocast|[Ss]caler")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _unread_variants():
    """Each fixture with every simple line that names autocast or a scaler rewritten as a tuple of those
    names (`_refs = (scaler, step, optimizer,)`): the names are in the code, but in no position the
    analysis reads. The variants that still parse."""
    variants = []
    for text in _texts():
        lines = text.split("\n")
        for index, line in enumerate(lines):
            stripped = line.strip()
            if not _KEY_WORDS.search(stripped) or stripped.startswith(("@", "#")) or stripped.endswith((":", "(", ",", "\\")):
                continue
            names = ", ".join(_NAME.findall(stripped.split("#")[0].replace("'", " ").replace('"', " ")))
            lines[index] = line[: len(line) - len(line.lstrip())] + f"_refs = ({names},)"
        variant = "\n".join(lines)
        if variant != text and python_ast.parse_quietly(variant) is not None:
            variants.append(variant)
    return variants


def test_a_module_whose_keys_are_only_in_unread_positions_is_ruled_out_without_its_parse(monkeypatch):
    text = _padded(
        "import torch\n\n\ndef check(value):\n    return isinstance(value, torch.amp.autocast_mode.autocast)\n"
        "\n\ndef train(model, x):\n    model(x).sum().backward()\n"
    )
    checker = prefilter.Prefilter([rule for rule in ALL_RULES if not rule.preview and rule.needs])
    parsed = []
    monkeypatch.setattr(python_ast, "parse", lambda source: parsed.append(source) or ast.parse(source))
    assert not checker.may_match(text)
    assert parsed == []  # decided from the statements on the "autocast" lines
    assert checker.may_match(text.replace("isinstance(value, torch.amp.autocast_mode.autocast)", "torch.autocast('cuda')"))
