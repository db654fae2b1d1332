"""The prefilter's speed tricks must never change what it keeps (the invalid examples are in test_rule_examples)."""

from __future__ import annotations

import random
import re

import pytest

from amp_lint.parse.patterns import literal_first
from amp_lint.parse.prefilter import Prefilter
from amp_lint.rules import ALL_RULES, rule_by_code

PATTERNS = sorted({pattern for rule in ALL_RULES for pattern in (*rule.needs, *(rule.ast_needs or ()))})
WORDS = sorted({word for pattern in PATTERNS for word in re.findall(r"[A-Za-z_]{3,}", pattern)})


def _texts():
    """Texts where the words sit next to word characters, punctuation, line starts and ends."""
    rng = random.Random(7)
    glue = ["", " ", "_", "x", ".", "(", "\n", "\r\n", "#", "'", "9", "S", "s"]
    texts = []
    for _ in range(400):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts += [rng.choice(glue), rng.choice(WORDS), rng.choice(glue)]
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("pattern", PATTERNS)
def test_literal_first_matches_where_the_pattern_matches(pattern):
    original, rewritten = re.compile(pattern), re.compile(literal_first(pattern))
    for text in _texts():
        assert (original.search(text) is None) == (rewritten.search(text) is None), (pattern, text)


def test_literal_first_rewrites_leading_boundaries_and_classes_only():
    assert literal_first(r"\bautocast\b") == r"autocast(?<=\bautocast)\b"
    assert literal_first(r"[Ss]caler") == r"caler(?<=[Ss]caler)"
    assert literal_first(r"\bbackward\b|clip_grad") == r"backward(?<=\bbackward)\b|clip_grad"
    assert literal_first(r"_autocast_(cpu|gpu)_") == r"_autocast_(cpu|gpu)_"


def _big(body: str) -> str:
    # The comment-line step runs where the second step would (files of 4,000 characters and more).
    return body + "".join(f"value_{i} = {i}\n" for i in range(400))


AMP011 = Prefilter([rule_by_code("AMP011")])


def test_names_only_in_comment_lines_do_not_pass():
    text = _big("import torch\n# the scaler is gone\n    # scaler.scale(loss)\nloss.backward()\n")
    assert AMP011.text_may_match(text)
    assert not AMP011.may_match(text)


def test_a_name_after_code_on_the_same_line_still_counts_as_text():
    # `#` after code on a line: the line is kept; the second step (Python's ast) decides.
    text = _big("scaler = torch.amp.GradScaler('cuda')  # keep\nloss.backward()\n")
    assert AMP011.may_match(text)


def test_a_lone_cr_file_is_not_cut_at_its_first_comment():
    text = _big("# comment\rscaler = torch.amp.GradScaler('cuda')\rloss.backward()\r").replace("\n", "\r")
    assert AMP011.may_match(text)


def _fixture_texts():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "fixtures"
    return [path.read_text(encoding="utf-8") for path in sorted(root.rglob("*.py"))]


def test_reading_only_the_hint_lines_keeps_every_decision():
    """The second step skips statements without a hint of the rules the first step left open, and asks only
    those rules' code groups; over every fixture it decides as a full read of every rule's groups does."""
    from amp_lint.parse.code_text import code_text
    from amp_lint.parse.prefilter import _COMMENT_LINES, _lines_with, code_identifiers
    from amp_lint.parse.python_ast import parse as _parse

    for rules in (ALL_RULES, [rule for rule in ALL_RULES if not rule.preview]):
        rules = [rule for rule in rules if rule.needs]  # a rule without needs keeps every file: no second step
        prefilter = Prefilter(rules)
        for text in _fixture_texts():
            tree = _parse(text)
            if tree is None:
                continue
            full = code_identifiers(tree)
            open_groups = prefilter._matching(_COMMENT_LINES.sub("", text))
            if not open_groups:
                continue
            code_groups, line_hints, text_groups = prefilter._second_step(tuple(open_groups))
            pruned = code_identifiers(tree, _lines_with(text, line_hints))
            assert set(pruned.split()) - {"autocast_device_object"} <= set(full.split())
            # Every rule's two steps on the full read: the needs of the text and the code groups of the code.
            expected = any(
                all(re.search(p, _COMMENT_LINES.sub("", text)) for p in rule.needs)
                and all(re.search(p, full) for p in (rule.ast_needs or rule.needs))
                for rule in rules
            )
            assert prefilter._matches(pruned, code_groups) == expected, text[:200]
            if expected:  # the code text (strings and comments gone) never rejects what the parse keeps
                assert prefilter._matches(code_text(text), text_groups), text[:200]


def test_a_device_copied_on_a_line_without_hints_still_counts():
    text = _big(
        "import torch\n"
        "dev = torch.device('cuda:0')\n"
        "d = dev\n"
        "with torch.autocast(d):\n"
        "    out = model(x)\n"
    )
    assert Prefilter([rule_by_code("AMP075")]).may_match(text)


def test_lines_are_counted_as_python_counts_them():
    from amp_lint.parse.prefilter import _lines_with

    assert _lines_with("a\r\nb\rstep\nc step\n", ("step",)) == [3, 4]
    assert _lines_with("x\x0cstep\n", ("step",)) == [1]  # a form feed is not a line break


ALIASED_AUTOCAST = {
    "import-alias": "from torch import autocast as ac\nwith ac('cpu', True):\n    out = model(x)\n",
    "assigned": "import torch\nac = torch.autocast\nwith ac('cpu', True):\n    out = model(x)\n",
    "partial": "import functools, torch\nac = functools.partial(torch.autocast, 'cpu')\nwith ac(True):\n    out = model(x)\n",
}


@pytest.mark.parametrize("text", ALIASED_AUTOCAST.values(), ids=list(ALIASED_AUTOCAST))
def test_autocast_reached_through_another_name_keeps_every_autocast_rule(text):
    for code in ("AMP054", "AMP075"):
        assert Prefilter([rule_by_code(code)]).may_match(_big(text)), code


def test_nested_autocast_through_an_alias_keeps_amp053():
    text = "import torch\nac = torch.autocast\nwith ac('cuda'):\n    with ac('cpu', enabled=False):\n        y = f(x)\n"
    assert Prefilter([rule_by_code("AMP053")]).may_match(_big(text))


def test_autocast_calls_with_star_arguments_add_no_device_or_dtype_fact():
    # AMP054 and AMP075 skip such calls: the file cannot hold their findings.
    text = _big("import torch\nwith torch.autocast(*args, **kwargs):\n    out = model(x)\ndtype = torch.float16\n")
    assert not Prefilter([rule_by_code("AMP054")]).may_match(text)
    assert not Prefilter([rule_by_code("AMP075")]).may_match(text)
    # Issue 46, principle 1: a `**` dict alone may be one the file writes out, whose keys AMP075 reads.
    alone = _big("import torch\nwith torch.autocast(**amp_kwargs):\n    out = model(x)\n")
    assert Prefilter([rule_by_code("AMP075")]).may_match(alone)


def test_the_dtype_fact_needs_a_dtype_in_the_autocast_call():
    other_call = _big("import torch\nwith torch.autocast('cuda'):\n    y = torch.zeros(3, dtype=torch.float16)\n")
    assert not Prefilter([rule_by_code("AMP054")]).may_match(other_call)
    in_the_call = _big("import torch\nwith torch.autocast('cuda', dtype=torch.float32):\n    y = model(x)\n")
    assert Prefilter([rule_by_code("AMP054")]).may_match(in_the_call)


def test_no_pattern_backtracks_catastrophically():
    """Every rule's patterns run over adversarial texts (long runs of `#`, spaces, backslashes and dots
    after a dot, as comments and separators have) in a child process: a pattern with nested repetition
    that can split such a run in exponentially many ways would never finish."""
    import subprocess
    import sys

    script = (
        "import re, sys\n"
        "patterns = sys.argv[1:]\n"
        "pieces = ['#', ' ', '\\\\', '.', '# ', '\\n', '#.']\n"
        "texts = ['x.' + piece * 60 + tail for piece in pieces for tail in ('', 'y', '\\n')]\n"
        "for pattern in patterns:\n"
        "    compiled = re.compile(pattern)\n"
        "    for text in texts:\n"
        "        compiled.search(text)\n"
    )
    subprocess.run([sys.executable, "-c", script, *PATTERNS], check=True, timeout=120)


def _rule_sets():
    from amp_lint.rules import default_codes

    defaults = set(default_codes())
    yield [rule for rule in ALL_RULES if rule.code in defaults]
    yield list(ALL_RULES)
    for rule in ALL_RULES:
        yield [rule]


def test_the_gate_never_rejects_a_text_the_groups_keep():
    """The gate (a few words, one of which every kept text holds) decides as the full first step does,
    for the default rules, all rules and each rule alone, over generated texts and the fixtures."""
    texts = _texts() + _fixture_texts()
    for rules in _rule_sets():
        gated = Prefilter(rules)
        ungated = Prefilter(rules)
        ungated._gate = None
        for text in texts:
            assert gated.text_may_match(text) == ungated.text_may_match(text), ([r.code for r in rules], text[:200])
            # The gate on bytes, before decoding (the main process's prefilter), invalid UTF-8 included.
            for raw in (text.encode("utf-8"), b"\xff\xfe" + text.encode("utf-8") + b"\xc3"):
                decoded = raw.decode("utf-8", errors="replace")
                if not gated.bytes_may_match(raw):
                    assert not ungated.text_may_match(decoded), [r.code for r in rules]
                # The gate's words found in the bytes spare the text step its own search for them.
                words = gated.gate_words_in(raw)
                assert (words is None or bool(words)) == gated.bytes_may_match(raw)
                assert gated.text_may_match(decoded, words) == ungated.text_may_match(decoded), [r.code for r in rules]


def test_the_gate_takes_shared_and_long_words():
    from amp_lint.parse.prefilter import _gate

    apex = ((None, ("apex",)), (None, ("init", "loss", "params")))
    scaler = ((None, ("GradScaler",)), (None, ("step",)))
    one_word = ((None, ("caler",)),)
    # "GradScaler" is covered by "caler", which a single-pattern group needs anyway; apex is one long word,
    # not three short ones.
    assert _gate([apex, scaler, one_word]) == ("apex", "caler")
    # A group whose patterns have no literal part can match any text: no gate.
    assert _gate([one_word, ((None, ()),)]) is None


def test_a_small_class_inside_a_word_is_spelled_out_when_the_words_get_much_longer():
    from amp_lint.parse.patterns import literal_hints

    # "custom_" is in a tenth of torch's files, "custom_fwd" and "custom_bwd" in five.
    assert literal_hints(r"\bcustom_[fb]wd\b") == ("custom_fwd", "custom_bwd")
    assert literal_hints(r"[Ss]caler") == ("caler",)  # one letter more is not worth a second scan
    assert literal_hints(r"custom_[fb]?wd") == ("custom_",)  # the class may match no letter
    assert literal_hints(r"autocast|x_[ab]_long_word") == ("autocast", "x_a_long_word", "x_b_long_word")
    for pattern in (r"\bcustom_[fb]wd\b", r"x_[ab]_long_word"):
        for text in ("custom_fwd(", "custom_bwd", "x_b_long_word", "custom_xwd"):
            if re.search(pattern, text):
                assert any(hint in text for hint in literal_hints(pattern)), (pattern, text)
    amp061 = Prefilter([rule_by_code("AMP061")])
    assert amp061.gate == ("custom_bwd", "custom_fwd")
    assert amp061.text_may_match("@torch.amp.custom_bwd\ndef backward(ctx, g): ...\n")
    assert not amp061.text_may_match("torch.library.custom_op('x', mutates_args=())\n")


def test_only_the_groups_of_the_gate_words_in_a_text_are_tried(monkeypatch):
    """A text that passes the gate with one word is matched against the groups that word stands for: a
    group whose gate words are all absent cannot match, and its patterns are not searched."""
    from amp_lint.parse import patterns as module
    from amp_lint.rules import default_codes

    rules = [rule for rule in ALL_RULES if rule.code in set(default_codes()) and not rule.preview]
    checker = Prefilter(rules)
    searched = []
    real = module._LazyPattern.search
    monkeypatch.setattr(module._LazyPattern, "search", lambda self, text: searched.append(self.source) or real(self, text))
    text = "x = torch.amp.custom_fwd\n" + "loss.backward()\noptimizer.step()\n" * 3
    assert [word for word in checker.gate if word in text] == ["custom_fwd"]
    assert checker.text_may_match(text)
    assert searched and all("custom_" in source or "amp" in source for source in searched), searched
    ungated = Prefilter(rules)
    ungated._gate = None
    assert ungated.text_may_match(text)


def test_the_default_gate_is_a_few_words():
    from amp_lint.engine import runner
    from amp_lint.rules import default_codes

    config = runner.CheckConfig(enabled=frozenset(default_codes()), fix=False, unsafe_fixes=False, with_edits=False, write=False)
    gate = runner._prefilter(config)._gate
    # Nine since AMP011 reads files that build an `Accelerator` with no word of a scaler: it owns one (issue 46).
    assert gate is not None and len(gate) <= 9 and "caler" in gate and "autocast" in gate and "Accelerator" in gate


def test_a_text_without_the_rules_words_compiles_no_pattern():
    """The patterns are compiled when first searched: a short run (pre-commit) whose files the literal hints
    decide compiles none of the rules' 140 patterns; a text that has the words compiles only what it asks."""
    from amp_lint.parse import patterns as module

    module.compile_needs.cache_clear()
    checker = Prefilter([rule for rule in ALL_RULES if not rule.preview and rule.needs])
    patterns = {pattern for groups in (checker._groups, checker._code_groups) for group in groups for pattern, _ in group}
    assert not checker.text_may_match("import os\nprint(os.getcwd())\n")
    assert all(pattern._compiled is None for pattern in patterns)
    assert checker.text_may_match("scaler = torch.cuda.amp.GradScaler()\nscaler.scale(loss).backward()\n")
    compiled = [pattern for pattern in patterns if pattern._compiled is not None]
    assert 0 < len(compiled) < len(patterns)


def test_a_caller_that_ran_the_first_step_is_not_made_to_run_it_again(monkeypatch):
    """`check_text` runs `text_may_match` before the memory guard and then `may_match`: told so
    (`first_step_passed`), `may_match` decides the same without scanning the whole text again."""
    texts = [_big(text) for text in _fixture_texts()]
    texts.append(_big("import torch\n# the scaler is gone\n    # scaler.scale(loss)\nloss.backward()\n"))
    texts.append(_big("import torch\nwith torch.autocast(*args, **kwargs):\n    out = model(x)\nscaler = 1\n"))
    for prefilter in (AMP011, Prefilter([rule_by_code("AMP054")]), Prefilter(ALL_RULES)):
        passed = [text for text in texts if prefilter.text_may_match(text)]
        decided = [prefilter.may_match(text) for text in passed]
        assert decided == [prefilter.may_match(text, first_step_passed=True) for text in passed]
    assert True in decided and False in [AMP011.may_match(text) for text in texts if AMP011.text_may_match(text)]
    scanned = []
    real = Prefilter._matches
    monkeypatch.setattr(Prefilter, "_matches", lambda self, text, groups=None: scanned.append(text) or real(self, text, groups))
    AMP011.may_match(texts[-2], first_step_passed=True)
    assert texts[-2] not in scanned


CODE_TEXT_CASES = {
    # source: what must survive, what must go
    "docstring": ('def f():\n    """uses scaler.step(opt)"""\n    return 1\n', ["def f", "return"], ["scaler"]),
    "single quotes": ("x = 'autocast' + \"GradScaler\"\n", ["x ="], ["autocast", "GradScaler"]),
    "escaped quote": ('x = "a \\" autocast"; y = backward()\n', ["backward"], ["autocast"]),
    "raw string": ('x = r"\\" autocast"; y = backward()\n', ["backward"], ["autocast"]),
    "comment": ("y = backward()  # scaler.step(opt)\n", ["backward"], ["scaler"]),
    "hash in a string": ('x = "# not a comment"; scaler.step(opt)\n', ["scaler.step"], []),
    "triple single": ("x = '''it's \"autocast\"'''; step()\n", ["step"], ["autocast"]),
    "f-string fields are code": ('x = f"{scaler.step(opt)} done"\n', ["scaler.step"], []),
    "rf-string": ("x = rf'{autocast()}'\n", ["autocast"], []),
    "bytes": ("x = b'autocast' + rb'caler'\n", ["x ="], ["autocast", "caler"]),
    "quote after a keyword": ('if"autocast":\n    pass\n', ["if", "pass"], ["autocast"]),
    "lone CR lines": ("x = 1 # autocast\ry = backward()\r", ["backward"], ["autocast"]),
}


@pytest.mark.parametrize("source, kept, gone", CODE_TEXT_CASES.values(), ids=list(CODE_TEXT_CASES))
def test_the_code_text_keeps_code_and_drops_strings_and_comments(source, kept, gone):
    from amp_lint.parse.code_text import code_text

    text = code_text(source)
    assert all(word in text for word in kept), text
    assert not any(word in text for word in gone), text


def test_every_fact_of_the_second_step_names_the_word_it_is_made_from():
    """`code_identifiers` adds facts (`autocast_twice`, `manual_grad_update`); the code-text step asks for
    the word each comes from instead, so every fact it can add must be in the table."""
    import inspect

    from amp_lint.parse import prefilter

    source = inspect.getsource(prefilter)
    made = set(re.findall(r'"((?:autocast_|manual_)[a-z_]+)"', source)) - {"autocast_device_"}
    assert made and made <= set(prefilter._FACT_SOURCES), sorted(made - set(prefilter._FACT_SOURCES))


def test_names_only_in_docstrings_and_messages_are_decided_without_a_parse(monkeypatch):
    from amp_lint.parse import python_ast

    text = _big('"""Call scaler.step(optimizer) after loss.backward()."""\nprint("no GradScaler here", "backward")\n')
    assert AMP011.text_may_match(text)
    monkeypatch.setattr(python_ast, "parse", lambda text: pytest.fail("parsed"))
    assert not AMP011.may_match(text)
