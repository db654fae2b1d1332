"""Decide cheaply whether a file can hold a finding of the selected rules, before parsing it with LibCST.

Every rule declares identifier patterns (`Rule.needs`) that its findings cannot exist without: a file
can hold a finding when, for at least one selected rule, every one of that rule's patterns matches.

1. On the raw text (microseconds per file): the text is a superset of the code's identifiers.
   Before the second step, the first is run again without the lines that are only a comment.
2. On the text without its strings and comments (`code_text`, a regular expression): a file whose names
   are only in docstrings, messages and comments is decided here, without a parse. Then on the
   identifiers in the positions the analysis model reads, collected from Python's own `ast`
   (about a tenth of a LibCST parse): names in strings, comments, docstrings and plain data no longer
   count. A file `ast` rejects (newer syntax than this Python's, say) passes, so LibCST decides.

Neither step can drop a file that holds a finding, as long as `needs` hold for the rule's findings; a
test runs both over every rule's invalid examples.
"""

from __future__ import annotations

import ast
import bisect
import re
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from amp_lint.files.lines import LINE_BREAK
from amp_lint.parse import python_ast
from amp_lint.parse.code_text import code_text
from amp_lint.parse.logical_lines import statements_on
from amp_lint.parse.patterns import compile_needs

# Below this size LibCST parses fast enough that the second step is not worth its cost.
_SECOND_STEP_MIN_CHARS = 4_000
# From this size the second step first reads the statements on its keys' lines (`_keys_may_match`): in
# torch's package `_C/__init__.pyi` and dynamo's `builder.py` are ruled out so, at a third of their parse.
# At most this many lines: past them, parsing the module costs little more.
_KEYS_MIN_CHARS = 20_000
_MOST_KEY_LINES = 200

# A line whose first character past the indentation is `#` holds no code: it is a comment, or the
# inside of a string that spans lines. Dropping those lines before the second step spares its parse of
# a tenth of torch (the 1.4 MB `common_methods_invocations.py` names a scaler only in a comment).
_COMMENT_LINES = re.compile(r"^[ \t\f]*#[^\r\n]*", re.M)  # not `.*`: it would run on past a lone \r


class Prefilter:
    def __init__(self, rules: Iterable[type]) -> None:
        rules = list(rules)
        needs = tuple(sorted({tuple(rule.needs) for rule in rules}))
        code_needs = tuple(sorted({tuple(rule.ast_needs or rule.needs) for rule in rules}))
        self._groups = compile_needs(needs)
        self._code_needs = code_needs
        self._code_groups = compile_needs(code_needs)
        # Which code groups each group's rules ask of the second step (the rules that share its needs).
        self._code_groups_of: Dict[int, Set[int]] = {}
        for rule in rules:
            self._code_groups_of.setdefault(needs.index(tuple(rule.needs)), set()).add(code_needs.index(tuple(rule.ast_needs or rule.needs)))
        self._second_steps: Dict[Tuple[int, ...], tuple] = {}
        self._keys: Dict[tuple, tuple] = {}  # code groups -> their keys (`_keys_may_match`)
        self._always = any(not n for n in needs)
        self._gate, self._gate_keys = _gate_and_keys(self._groups)
        ascii_gate = self._gate is not None and all(word.isascii() for word in self._gate)
        self._byte_gate = tuple(word.encode("ascii") for word in self._gate) if ascii_gate else None

    @property
    def gate(self) -> Optional[Tuple[str, ...]]:
        """Words one of which is in every text that can hold a finding of the rules (None: no such words)."""
        return self._gate

    def _matches(self, text: str, groups=None) -> bool:
        return bool(self._matching(text, groups, every=False))

    def _matching(self, text: str, groups=None, every: bool = True, gate_words: Optional[FrozenSet[str]] = None) -> List[int]:
        """The indices of the groups (default: the rules' `needs`) that match the text; with `every` False,
        only the first. `gate_words`: the gate's words in the text, known already (`gate_words_in`)."""
        seen: dict = {}  # several rules share patterns: scan the text once per pattern
        absent: list = []  # hints not in the text: "caler" absent, so is "GradScaler"
        present: set = set()  # hints found, for the next pattern that asks
        if gate_words is not None and self._gate is not None:
            present.update(gate_words)
            absent.extend(word for word in self._gate if word not in gate_words)

        def has(hint: str) -> bool:
            if hint in present:
                return True
            if any(missing in hint for missing in absent):
                return False
            if hint in text:
                present.add(hint)
                return True
            absent.append(hint)
            return False

        def found(pattern, hints) -> bool:
            if pattern not in seen:
                seen[pattern] = (not hints or any(has(hint) for hint in hints)) and pattern.search(text) is not None
            return seen[pattern]

        indices: Iterable[int] = range(len(groups if groups is not None else self._groups))
        if groups is None:
            groups = self._groups
            if self._gate is not None:
                in_text = [word for word in self._gate if has(word)]
                if not in_text:
                    return []  # most files: a few scans of the text decide
                # A group can match only where one of its own gate words is: the others are not tried.
                indices = [index for index in indices if not self._gate_keys[index].isdisjoint(in_text)]
        matching = []
        for index in indices:
            if all(found(pattern, hints) for pattern, hints in groups[index]):
                matching.append(index)
                if not every:
                    break
        return matching

    def text_may_match(self, text: str, gate_words: Optional[FrozenSet[str]] = None) -> bool:
        """The first step alone (cheap enough for the main process to run over every file). `gate_words`:
        the gate's words in the text, when its bytes were searched for them (`gate_words_in`)."""
        return self._always or bool(self._matching(text, every=False, gate_words=gate_words))

    def bytes_may_match(self, raw: bytes) -> bool:
        """The gate alone, on a file's bytes before they are decoded: False, and `text_may_match` of the
        decoded text is False too (the gate's words are ASCII, and UTF-8 decoding, with replacement
        characters or not, keeps every ASCII byte as it is)."""
        return self._always or self._byte_gate is None or any(word in raw for word in self._byte_gate)

    def gate_words_in(self, raw: bytes) -> Optional[FrozenSet[str]]:
        """The gate's words in a file's bytes, each searched once; empty: `bytes_may_match` is False. They
        are the words of the decoded text too (see `bytes_may_match`), and `text_may_match` need not search
        the text for them again. None when there is no byte gate."""
        if self._always or self._byte_gate is None:
            return None
        return frozenset(word for word, encoded in zip(self._gate, self._byte_gate) if encoded in raw)

    def may_match(self, text: str, *, always_second_step: bool = False, first_step_passed: bool = False) -> bool:
        """Both steps; `first_step_passed`: the caller has just had `text_may_match(text)` say True."""
        if self._always:
            return True
        if not first_step_passed and not self._matches(text):
            return False
        if len(text) < _SECOND_STEP_MIN_CHARS and not always_second_step:
            return True
        open_groups = self._matching(_COMMENT_LINES.sub("", text))
        if not open_groups:
            return False  # the names are only in comments: no need for the second step's parse
        code_groups, line_hints, text_groups = self._second_step(tuple(open_groups))
        if not self._matches(code_text(text), text_groups):
            return False  # the names are only in strings and comments: decided without a parse
        if len(text) >= _KEYS_MIN_CHARS and not self._keys_may_match(text, code_groups):
            return False  # no group's key is in the code of its lines: decided without parsing the module
        tree = python_ast.parse(text)
        if tree is None:
            return True
        return self._matches(code_identifiers(tree, _lines_with(text, line_hints)), code_groups)

    def _keys_may_match(self, text: str, code_groups) -> bool:
        """Whether each group's key could match the code (False: no group can), read from the statements on
        its lines alone (`logical_lines`), not from the module's parse.

        A group's key is one of its patterns, the one with the rarest words. A group matches only where its
        key does, and a pattern's matches are names spelled on the lines of its words, or facts about the
        calls on "autocast" lines (a pattern that can match a fact made elsewhere is no key). So if no key
        matches the names the statements on those lines hold, in the positions `code_identifiers` reads, no
        group matches the module's. True when that cannot be told so cheaply (a group without a key, too
        many lines, statements that do not stand alone)."""
        keys = self._keys.get(code_groups)
        if keys is None:
            keys = self._keys[code_groups] = _keys_of(code_groups)
        if not keys:
            return True
        lines = _lines_with(text, tuple(sorted({"autocast"}.union(*(hints for _, hints in keys)))))
        if len(lines) > _MOST_KEY_LINES or _in_use_on_sight(text, {hint for _, hints in keys for hint in hints}):
            return True
        statements = statements_on(text, lines)
        tree = python_ast.parse_quietly(statements) if statements is not None else None
        if tree is None:
            return True
        return self._matches(code_identifiers(tree, some_lines=True), tuple((key,) for key in keys))

    def _second_step(self, open_groups: Tuple[int, ...]):
        """What the second step asks after the first left these groups open: only the code groups of their
        rules (a rule whose names the code lacks cannot find anything, whatever the other rules' code
        identifiers), the lines of those groups' words, and the groups as the code text is asked them."""
        asked = self._second_steps.get(open_groups)
        if asked is None:
            indices = sorted({index for group in open_groups for index in self._code_groups_of[group]})
            code_groups = tuple(self._code_groups[index] for index in indices)
            # The same groups on the code text (`code_text`), before the parse.
            text_groups = compile_needs(tuple(tuple(_on_code_text(p) for p in self._code_needs[i]) for i in indices))
            asked = self._second_steps[open_groups] = (code_groups, _line_hints(code_groups), text_groups)
        return asked


_IN_USE = ("import ", "from ", "with ", "async with ", "@")


def _in_use_on_sight(text: str, hints) -> bool:
    """A line that plainly uses a name with one of the hints in a position `code_identifiers` reads (it
    calls it, imports it, enters it, decorates with it): the file will pass, and `_keys_may_match` need
    not read its statements to say so."""
    for hint in hints:
        position = text.find(hint)
        while position != -1:
            start = text.rfind("\n", 0, position) + 1
            line = text[start : text.find("\n", position)].lstrip()
            if line.startswith(_IN_USE):
                return True
            end = position + len(hint)
            while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                end += 1
            if text[end : end + 1] == "(" and not line.startswith(("def ", "async def ", "class ")):
                return True
            position = text.find(hint, position + 1)
    return False


def _keys_of(code_groups) -> tuple:
    """One pattern per group, its key: of the patterns whose matches all come from the lines of their own
    words (or from "autocast" lines), the one with the rarest words (a word of n letters is in a text with
    a chance of 2**-n, as `_gate` counts). Empty when a group has no such pattern."""
    keys = []
    for group in code_groups:
        candidates = [(pattern, hints) for pattern, hints in group if hints and _facts_on_its_lines(pattern, hints)]
        if not candidates:
            return ()
        keys.append(min(candidates, key=lambda candidate: sum(2.0 ** -len(hint) for hint in candidate[1])))
    return tuple(keys)


def _facts_on_its_lines(pattern, hints) -> bool:
    """Every fact the pattern can match is made from a word of its own or from "autocast" (`_FACT_SOURCES`)."""
    for fact, source in _FACT_SOURCES.items():
        word = source.replace(r"\b", "")
        if pattern.search(fact) is not None and word != "autocast" and word not in hints:
            return False
    return True


_SCAN_COST = 0.02  # in the units of `_gate`'s cost: the chance that a hint of n letters is in a text, 2**-n


def _gate(groups) -> Optional[Tuple[str, ...]]:
    """Hints one of which is in every text that some group can match; None when there are none such.
    See `_gate_and_keys`."""
    return _gate_and_keys(groups)[0]


def _gate_and_keys(groups) -> Tuple[Optional[Tuple[str, ...]], Tuple[frozenset, ...]]:
    """The gate (below), and for each group its keys: the gate words one of which is in every text that
    group can match (the words of the pattern the gate took for it).

    A group matches only where each of its patterns does, and a pattern only where one of its hints is:
    so the hints of one pattern per group are enough. Each hint is replaced by the shortest hint of the
    set it contains ("GradScaler" by "caler"), and the patterns are chosen so that the gate is small and
    its words long (likely rare): `apex` alone, not the four words of apex's calls. On torch's package
    it rejects most files with a few scans of their text.
    """
    usable = [[hints for _, hints in group if hints] for group in groups]
    if not usable or not all(usable):
        return None, ()
    every_hint = {hint for options in usable for hints in options for hint in hints}
    base = {hint: min((other for other in every_hint if other in hint), key=lambda other: (len(other), other)) for hint in every_hint}

    def added_cost(hints, gate) -> float:  # how often a word lets a text through (2**-len), and its scan
        return sum(2.0 ** -len(word) + _SCAN_COST for word in {base[hint] for hint in hints} - gate)

    # Groups with one pattern decide first (their words must be in); then each group takes the pattern
    # that adds least to the words already in.
    gate: set = set()
    chosen = {}
    for index in sorted(range(len(usable)), key=lambda i: len(usable[i])):
        best = min(usable[index], key=lambda hints: added_cost(hints, gate))
        chosen[index] = frozenset(base[hint] for hint in best)
        gate.update(chosen[index])
    return tuple(sorted(gate)), tuple(chosen[index] for index in range(len(usable)))


# The facts `code_identifiers` adds, each with the word it is made from: every one comes from a call, a
# decorator, an import or an attribute that spells that word in the code.
_FACT_SOURCES = {
    **{
        fact: r"\bautocast\b"
        for fact in (
            "autocast_applied", "autocast_bare_decorator", "autocast_bool_arg", "autocast_device_call",
            "autocast_device_expr", "autocast_device_indexed", "autocast_device_missing", "autocast_device_object",
            "autocast_device_splat", "autocast_dtype_arg", "autocast_second_positional", "autocast_twice",
        )
    },
    "manual_grad_update": r"\bgrad\b",
}


def _on_code_text(pattern: str) -> str:
    """A code pattern (matched against `code_identifiers`), for the code text instead: a fact it can match
    stands for the word the fact is made from."""
    sources = sorted({source for fact, source in _FACT_SOURCES.items() if re.search(pattern, fact)})
    return "|".join([pattern, *sources]) if sources else pattern


def _line_hints(groups) -> Optional[Tuple[str, ...]]:
    """The words whose lines the second step must read; None when a pattern has no literal part."""
    # The lines autocast facts come from. Not those of device objects (`dev = torch.device(...)`): reading
    # only some lines, `code_identifiers` takes any name passed to autocast for a device object.
    hints = {"autocast"}
    for group in groups:
        for _, pattern_hints in group:
            if not pattern_hints:
                return None
            hints.update(pattern_hints)
    return tuple(sorted(hints))


def _lines_with(text: str, hints: Optional[Tuple[str, ...]]) -> Optional[List[int]]:
    """The sorted line numbers (as `ast` counts them) of the lines that contain a hint; None: every line."""
    if hints is None:
        return None
    positions = _positions_of(text, hints)
    if "\r" not in text:  # lines broken at `\n` alone: counted between the positions, not for every line
        lines, line, counted = [], 1, 0
        for position in positions:
            line += text.count("\n", counted, position)
            counted = position
            if not lines or lines[-1] != line:
                lines.append(line)
        return lines
    starts = [match.end() for match in LINE_BREAK.finditer(text)]
    return sorted({bisect.bisect_right(starts, position) + 1 for position in positions})


def _positions_of(text: str, hints: Tuple[str, ...]) -> List[int]:
    """Where the hints are in the text, in order."""
    positions = []
    for hint in hints:  # one fast substring search per hint: an alternation of fifty words crawls
        position = text.find(hint)
        while position != -1:
            positions.append(position)
            position = text.find(hint, position + 1)
    positions.sort()
    return positions


def _statements_to_read(tree, hint_lines: Optional[List[int]]) -> Iterator:
    """`ast.walk`, minus the statements whose lines hold none of the hints (with all they contain).

    A statement without a hint on its lines cannot add a name that a pattern needs: every pattern's
    matches contain one of its hints, and the facts about autocast calls come from lines with "autocast".
    (Which names are device objects is the exception: `code_identifiers` assumes the worst for every name
    passed to autocast when something was skipped.)
    """
    pending = [tree]
    while pending:
        node = pending.pop()
        yield node
        for field in _child_fields(type(node)):
            value = getattr(node, field, None)
            if type(value) is list:
                for child in value:
                    if isinstance(child, ast.stmt):
                        if hint_lines is not None and not _holds_a_hint_line(child, hint_lines):
                            continue
                        pending.append(child)
                    elif isinstance(child, ast.AST):
                        pending.append(child)
            elif isinstance(value, ast.AST):
                pending.append(value)


def _holds_a_hint_line(statement: ast.stmt, hint_lines: List[int]) -> bool:
    first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())])
    index = bisect.bisect_left(hint_lines, first)
    return index < len(hint_lines) and hint_lines[index] <= statement.end_lineno


_CHILD_FIELDS: dict = {}


def _child_fields(node_type: type) -> Tuple[str, ...]:
    """The fields of an `ast` node type that can hold nodes; `ctx` (Load, Store) never matters here.
    `ast.iter_child_nodes` finds them with a generator and an isinstance test per field of every node."""
    fields = _CHILD_FIELDS.get(node_type)
    if fields is None:
        fields = _CHILD_FIELDS[node_type] = tuple(name for name in node_type._fields if name != "ctx")
    return fields


def code_identifiers(tree, hint_lines: Optional[List[int]] = None, some_lines: bool = False):
    """The identifiers in the positions the analysis model reads, space-separated.

    Those positions: everything in a call's callee (receivers included) and its keyword names, `with`
    items, decorators, class bases, imports, annotations, and the names an assignment binds or copies (`ctx = torch.autocast(...)`, `amp_cm = autocast if amp else nullcontext`). A name that
    only appears elsewhere (in a string, a comment, a dict of API references) cannot make a finding.
    `tree` is the module's Python `ast`; with `hint_lines` (see `_lines_with`), only the statements
    on those lines are read. `some_lines`: the tree is of the statements on some lines of the module
    (`logical_lines`), and what the module binds elsewhere is not known, as with `hint_lines`.
    """
    names: set = set()
    autocast_calls = []
    # autocast under another name (`as ac`, `ac = torch.autocast`, `partial(torch.autocast, ...)`): the
    # analysis follows those names, the facts below do not, so every fact is assumed.
    aliased = False
    device_objects = set()  # names bound to torch.device(...) or annotated torch.device
    copies = []
    for node in _statements_to_read(tree, hint_lines):
        kind = type(node)
        if kind is ast.Call:
            _add_names(node.func, names)
            if _callee_name(node.func) in MANUAL_UPDATE_METHODS and any(
                _reads_grad(value) for value in (*node.args, *(k.value for k in node.keywords))
            ):
                names.add("manual_grad_update")  # `p.data.add_(p.grad, alpha=-lr)`
            if _callee_name(node.func) == "autocast" and not isinstance(node.func, ast.Call):
                autocast_calls.append(node)
            elif isinstance(node.func, ast.Call) and _callee_name(node.func.func) == "autocast":
                names.add("autocast_applied")  # `torch.autocast("cuda")(x)`
            for keyword in node.keywords:
                if keyword.arg:
                    names.add(keyword.arg)
            if _callee_name(node.func) == "partial" and node.args:
                _add_names(node.args[0], names)
                aliased |= _callee_name(node.args[0]) == "autocast" and not isinstance(node.args[0], ast.Call)
        elif kind is ast.With or kind is ast.AsyncWith:
            for item in node.items:
                _add_names(item.context_expr, names)
        elif kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
            for decorator in node.decorator_list:
                _add_names(decorator, names)
                if not isinstance(decorator, ast.Call) and _callee_name(decorator) == "autocast":
                    names.add("autocast_bare_decorator")
        elif kind is ast.ClassDef:
            for expression in (*node.bases, *node.decorator_list):
                _add_names(expression, names)
        elif kind is ast.Import or kind is ast.ImportFrom:
            if getattr(node, "module", None):
                names.update(node.module.split("."))
            for alias in node.names:
                names.update(alias.name.split("."))
                if alias.asname:
                    names.add(alias.asname)
                    aliased |= alias.name.split(".")[-1] == "autocast"
        elif kind is ast.Assign or kind is ast.AnnAssign or kind is ast.AugAssign:
            if kind is ast.AugAssign and _reads_grad(node.value):
                names.add("manual_grad_update")  # `p.data -= lr * p.grad` (AMP100's update without an optimizer)
            for target in getattr(node, "targets", None) or [node.target]:
                _add_names(target, names)
            if getattr(node, "annotation", None) is not None:
                _add_names(node.annotation, names)
            for alternative in _alternatives(node.value):
                _add_names(alternative, names)
                aliased |= _callee_name(alternative) == "autocast" and not isinstance(alternative, ast.Call)
            targets = getattr(node, "targets", None) or [node.target]
            bound = [t.id for t in targets if isinstance(t, ast.Name)]
            if isinstance(node.value, ast.Call) and _callee_name(node.value.func) == "device":
                device_objects.update(bound)
            elif bound and isinstance(node.value, ast.Call) and _callee_name(node.value.func) == "autocast":
                # `ctx = torch.autocast(...)`: whether `ctx(x)` follows is on a line the second step may
                # not read (no hint on it): assume it does.
                names.add("autocast_applied")
            elif isinstance(node.value, ast.Name):
                copies.extend((name, node.value.id) for name in bound)
            if _callee_name(getattr(node, "annotation", None)) == "device":
                device_objects.update(bound)
        elif kind is ast.arg:
            if node.annotation is not None:
                _add_names(node.annotation, names)
                if _callee_name(node.annotation) == "device":
                    device_objects.add(node.arg)
    for _ in range(5):  # `dev = torch.device(...)`, `d = dev`: d is one too
        device_objects.update(name for name, source in copies if source in device_objects)
    if aliased:
        names.update(_ALL_AUTOCAST_FACTS)
    # A device name copied on a skipped line (`d = dev`) may be a device object: assume it is.
    names.update(_autocast_facts(autocast_calls, device_objects, any_name_is_a_device=some_lines or hint_lines is not None))
    return " ".join(names)


# In-place tensor methods that update a parameter by hand from its gradient (`p.data.add_(p.grad, ...)`):
# AMP100's conversion reads them too (`conversion._manual_update`).
MANUAL_UPDATE_METHODS = frozenset({"add_", "sub_", "addcmul_", "addcdiv_", "copy_"})


def _reads_grad(expression) -> bool:
    return any(type(node) is ast.Attribute and node.attr == "grad" for node in ast.walk(expression))


_ALL_AUTOCAST_FACTS = (
    "autocast_applied",
    "autocast_twice",
    "autocast_second_positional",
    "autocast_bool_arg",
    "autocast_dtype_arg",
    "autocast_device_missing",
    "autocast_device_splat",
)


def _autocast_facts(calls, device_objects, any_name_is_a_device: bool = False) -> set:
    """Tokens that say what the file's autocast calls look like, for rules' `ast_needs`.

    The rules that read the dtype argument (AMP054) skip a call with `*args` or `**kwargs`, so such a call
    adds no dtype fact; a device written out before or beside the splat is still AMP075's (a missing one is not).
    """
    facts = set()
    if len(calls) >= 2:
        facts.add("autocast_twice")
    for call in calls:
        positional = [a for a in call.args if not isinstance(a, ast.Starred)]
        if len(positional) >= 2:
            facts.add("autocast_second_positional")
        if any(isinstance(a, ast.Constant) and isinstance(a.value, bool) for a in positional):
            facts.add("autocast_bool_arg")
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        first = call.args[0] if call.args else None
        device = (first if first is not None and not isinstance(first, ast.Starred) else None) or keywords.get("device_type")
        splat = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
        if not splat and (len(positional) >= 2 or "dtype" in keywords):
            facts.add("autocast_dtype_arg")
        if device is None:
            if not splat:
                facts.add("autocast_device_missing")
            elif not any(isinstance(a, ast.Starred) for a in call.args) and any(
                k.arg is None and isinstance(k.value, (ast.Name, ast.Dict, ast.Call)) for k in call.keywords
            ):
                facts.add("autocast_device_splat")  # `autocast(**amp_kwargs)`: the dict may be the file's own
        elif isinstance(device, ast.Constant):
            if not isinstance(device.value, str) or ":" in device.value:
                facts.add("autocast_device_indexed")
        elif isinstance(device, ast.JoinedStr):
            facts.add("autocast_device_indexed")
        elif isinstance(device, ast.Call):
            facts.add("autocast_device_call")
        elif isinstance(device, ast.Name):
            if device.id in device_objects or any_name_is_a_device:
                facts.add("autocast_device_object")
            facts.add("autocast_device_expr")  # the analysis resolves it (`dt = str(x.device)`)
        elif isinstance(device, ast.Attribute) and "device" in device.attr:
            facts.add("autocast_device_object")  # `x.device` is a torch.device
        elif isinstance(device, ast.Subscript) or (isinstance(device, ast.Attribute) and device.attr != "type"):
            facts.add("autocast_device_expr")  # `ctx["dev"]`, `self.dev`: resolved by the analysis
    return facts


def _add_names(expression, names: set) -> None:
    """The names of a dotted chain (`self.scaler.step`), the common case, without a generic walk."""
    while expression is not None:
        kind = type(expression)
        if kind is ast.Attribute:
            names.add(expression.attr)
            expression = expression.value
        elif kind is ast.Name:
            names.add(expression.id)
            return
        elif kind is ast.Call:
            expression = expression.func  # `a.b().c`: the call's own names are added where it is visited
        elif kind is ast.Subscript:
            expression = expression.value
        else:
            for node in ast.walk(expression):
                if type(node) is ast.Name:
                    names.add(node.id)
                elif type(node) is ast.Attribute:
                    names.add(node.attr)
            return


def _alternatives(value) -> Iterator:
    """The expressions an assignment may copy: `a if c else b` is either side; calls are walked as calls."""
    if value is None:
        return
    if isinstance(value, ast.IfExp):
        yield from _alternatives(value.body)
        yield from _alternatives(value.orelse)
    elif isinstance(value, ast.BoolOp):
        for operand in value.values:
            yield from _alternatives(operand)
    elif isinstance(value, (ast.Name, ast.Attribute)):
        yield value


def _callee_name(func) -> str:
    if isinstance(func, ast.Call):
        func = func.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""
