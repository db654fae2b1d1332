"""Where a scaler held in an attribute can go, followed by data flow through the whole package (issue 26,
principle 3: open world, report what is proved).

A step through `self.<attribute>` with no `update()` in its function is a finding only when no caller can
supply the update. That is proved when the package is the scaler's only driver:

- the package scales losses with it (`.scale(loss)`): a scaler the package only steps must be driven by its
  users (they scale through it), who may update it too;
- the attribute is bound to a GradScaler the package builds (a `*GradScaler(...)` call, a local alias of the
  class, or a package function that returns such a call on every path), directly or through locals,
  on at least one path (a scaler a user may pass in instead does not undo the path where it is built);
- every read of the attribute, anywhere in the package and on any object (the attribute name stands for
  every class that uses it: conservative), and of every value it flows to (a local, another attribute, a
  parameter of a package function it is passed to) is a protocol call or a read that cannot reach
  `update`: a method or attribute other than `update`, a test (`is None`, `if x:`), a formatted value,
  `isinstance`/`type`/`id`/`hasattr`/`getattr(x, "<not update>")`;
- it is never `update`d, returned, yielded, put in a container, called, passed to a call that does not
  resolve to a package function whose parameter is followed in turn, or named in a string
  (`getattr(obj, "scaler")`, `attrgetter("scaler")`: a property that exposes it, lightning's
  `Trainer.scaler`).

The attribute itself being public does not count as handing the scaler out (a user who reads
`plugin.scaler` does not drive the protocol the package drives); anything the package returns does.
Only `ast` and the file system are used, so the answer costs a parse of the files that name the attribute.
"""

from __future__ import annotations

import ast
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from amp_lint.analysis.project import ast_dotted_name

# A module read for this proof (accelerate's accelerator.py is 200 kB; larger files are generated tables).
MAX_REACH_MODULE_BYTES = 400_000
_READS_ONLY = frozenset({"isinstance", "type", "id", "hasattr", "callable", "str", "repr", "bool"})
_TEST_PARENTS = (ast.If, ast.While, ast.Assert)


class _Package:
    """The package's files, read and parsed on demand (each at most once)."""

    def __init__(self, files: Iterable[str], note_read: Optional[Callable[[str], None]] = None) -> None:
        self.files = tuple(files)
        self._note_read = note_read  # the result of the checked file depends on every file read here
        self._data: Dict[str, Optional[bytes]] = {}
        self._trees: Dict[str, Optional[Tuple[ast.AST, Dict[ast.AST, ast.AST]]]] = {}

    def data(self, path: str) -> Optional[bytes]:
        if path not in self._data:
            try:
                with open(path, "rb") as handle:
                    data = handle.read(MAX_REACH_MODULE_BYTES + 1)
            except OSError:
                data = None
            self._data[path] = data
            if self._note_read is not None:
                self._note_read(path)
        return self._data[path]

    def tree(self, path: str) -> Optional[Tuple[ast.AST, Dict[ast.AST, ast.AST]]]:
        if path not in self._trees:
            data = self.data(path)
            parsed = None
            if data is not None and len(data) <= MAX_REACH_MODULE_BYTES:
                try:
                    tree = ast.parse(data.decode("utf-8-sig", "replace"))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    tree = None
                if tree is not None:
                    parents: Dict[ast.AST, ast.AST] = {}
                    for node in ast.walk(tree):
                        for child in ast.iter_child_nodes(node):
                            parents[child] = node
                    parsed = (tree, parents)
            self._trees[path] = parsed
        return self._trees[path]

    def naming(self, name: str) -> Iterable[str]:
        needle = name.encode("utf-8")
        for path in self.files:
            data = self.data(path)
            if data is not None and needle in data:
                yield path


class _Failed(Exception):
    """The scaler may reach something that could update it."""


class _Reach:
    def __init__(self, package: _Package) -> None:
        self.package = package
        self.attributes: List[str] = []
        # attribute -> the classes whose `self.<attribute>` may hold the scaler (None: any object's)
        self.holders: Dict[str, Optional[Set[str]]] = {}
        self._families: Dict[str, Set[str]] = {}
        self.followed: Set[Tuple[int, str]] = set()  # (id of a function node, local name)
        self.built = False
        self.scaled = False  # the package scales losses with it: its users need not touch the scaler
        self._defs: Dict[str, List[Tuple[ast.AST, bool, Dict[ast.AST, ast.AST]]]] = {}

    # --- the attributes the scaler is stored in --------------------------------------------------------
    def run(self, attribute: str, class_name: Optional[str] = None) -> bool:
        self.attributes.append(attribute)
        self.holders[attribute] = self.family(class_name) if class_name else None
        done = 0
        while done < len(self.attributes):
            self._scan_attribute(self.attributes[done])
            done += 1
        return self.built and self.scaled

    def _scan_attribute(self, attribute: str) -> None:
        for path in self.package.naming(attribute):
            parsed = self.package.tree(path)
            if parsed is None:
                raise _Failed(path)  # a file we cannot read may do anything with it
            tree, parents = parsed
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr == attribute:
                    if not self._may_hold(node, attribute, parents):
                        continue  # `self.<attribute>` of a class unrelated to the scaler's holders
                    if isinstance(node.ctx, ast.Load):
                        self._use(node, parents)
                    elif isinstance(node.ctx, ast.Store):
                        self._stored(node, parents)
                elif isinstance(node, ast.Constant) and node.value == attribute:
                    self._named_in_string(node, parents)

    def _may_hold(self, node: ast.Attribute, attribute: str, parents) -> bool:
        """Can `node` (`x.<attribute>`) be the scaler? Any object's attribute can, except `self.<attribute>` in a
        method of a class that is neither a holder nor related to one by inheritance (lightning's
        FSDPPrecision keeps its own `self.scaler` beside MixedPrecision's)."""
        classes = self.holders.get(attribute)
        if classes is None:
            return True
        holder = _self_class(node, parents)
        return holder is None or holder in classes

    def family(self, class_name: str) -> Set[str]:
        """The classes whose methods may run on an instance of `class_name` (by name, in the package): its
        subclasses, and the bases of it and of them, transitively; not a sibling class (another subclass of
        a shared base) unless a subclass inherits from it too."""
        if class_name in self._families:
            return self._families[class_name]
        down, todo = {class_name}, [class_name]
        while todo and len(down) < 64:
            name = todo.pop()
            for node in self._classes_naming(name):
                if name in _base_names(node) and node.name not in down:
                    down.add(node.name)
                    todo.append(node.name)
        family, todo = set(down), list(down)
        while todo and len(family) < 128:
            name = todo.pop()
            for node in self._classes_naming(name):
                if node.name == name:
                    for base in _base_names(node) - family - {"", "object"}:
                        family.add(base)
                        todo.append(base)
        self._families[class_name] = family
        return family

    def _classes_naming(self, name: str) -> Iterator[ast.ClassDef]:
        for path in self.package.naming(name):
            parsed = self.package.tree(path)
            if parsed is not None:
                yield from (n for n in ast.walk(parsed[0]) if isinstance(n, ast.ClassDef))

    def _stored(self, target: ast.AST, parents) -> None:
        statement = parents.get(target)
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            if target in (statement.targets if isinstance(statement, ast.Assign) else [statement.target]):
                self._origin(statement.value, parents)
                return
        if isinstance(statement, ast.AugAssign):
            raise _Failed("augmented assignment")
        # a tuple target, a `for`/`with` target: what it holds is not followed

    def _named_in_string(self, node: ast.Constant, parents) -> None:
        call = parents.get(node)
        if isinstance(call, ast.Call) and node in call.args:
            name = ast_dotted_name(call.func) or ""
            if name == "hasattr":
                return
            if name == "getattr" and call.args.index(node) == 1:
                self._use(call, parents)  # `getattr(obj, "scaler", None)`: its result is the scaler
                return
            raise _Failed(f"{name}(... {node.value!r})")
        # a docstring, a log message, a dict key: not a way to the object

    # --- where the scaler is built --------------------------------------------------------------------
    def _origin(self, value: ast.AST, parents, depth: int = 0) -> None:
        """Where the value stored in a holder comes from: a construction (`built`), or a package attribute or
        a parameter whose callers pass one (followed too: the same object is reachable through them)."""
        if depth > 8:
            return
        if isinstance(value, ast.IfExp):
            self._origin(value.body, parents, depth + 1)
            self._origin(value.orelse, parents, depth + 1)
        elif isinstance(value, ast.BoolOp):
            for operand in value.values:
                self._origin(operand, parents, depth + 1)
        elif isinstance(value, ast.Call):
            self.built = self.built or self._builds(value, parents)
        elif isinstance(value, ast.Attribute):
            holder = _self_class(value, parents)
            self._hold(value.attr, self.family(holder) if holder is not None else None)
        elif isinstance(value, ast.Name):
            function = _enclosing_function(value, parents)
            for node in ast.walk(function) if function is not None else ():
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets):
                    self._origin(node.value, parents, depth + 1)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._passed_in(function, value.id, parents, depth)

    def _passed_in(self, function, param: str, parents, depth: int) -> None:
        """`param` of `function`: what the package's calls of it pass there (a class's `__init__`: its
        constructions, and `super().__init__(...)` in its subclasses)."""
        owner = parents.get(function)
        is_method = isinstance(owner, ast.ClassDef) and not _static(function)
        if param not in _parameter_names(function):
            return
        positional = [a.arg for a in function.args.posonlyargs + function.args.args][1 if is_method else 0 :]
        position = positional.index(param) if param in positional else None
        constructor = isinstance(owner, ast.ClassDef) and function.name == "__init__"
        name = owner.name if constructor else function.name
        for path in self.package.naming(name):
            parsed = self.package.tree(path)
            if parsed is None:
                raise _Failed(path)
            tree, call_parents = parsed
            for call in ast.walk(tree):
                if not isinstance(call, ast.Call) or _callee_name(call) not in (name, "__init__"):
                    continue
                if _callee_name(call) == "__init__":
                    subclass = _enclosing_class(call, call_parents)
                    if subclass is None or name not in _base_names(subclass):
                        continue
                passed = [k.value for k in call.keywords if k.arg == param]
                if not passed and position is not None:
                    if any(isinstance(a, ast.Starred) for a in call.args[: position + 1]) or any(k.arg is None for k in call.keywords):
                        raise _Failed("a starred call")
                    passed = call.args[position : position + 1]
                for argument in passed:
                    self._origin(argument, call_parents, depth + 1)
                    if isinstance(argument, ast.Name):
                        caller = _enclosing_function(call, call_parents)
                        if caller is not None:
                            self._follow_local(caller, argument.id, call_parents)

    def _hold(self, attribute: str, classes: Optional[Set[str]]) -> None:
        """The scaler may be held in `<instance of classes>.attribute` (None: any object's)."""
        known = self.holders.get(attribute, set())
        if attribute not in self.attributes:
            self.attributes.append(attribute)
            self.holders[attribute] = classes
        elif known is not None:
            if classes is None:
                self.holders[attribute] = None
                self.attributes.append(attribute)
            elif not classes <= known:
                self.holders[attribute] = known | classes
                self.attributes.append(attribute)  # scanned again for the classes added

    def _builds(self, call: ast.Call, parents) -> bool:
        dotted = ast_dotted_name(call.func) or ""
        last = dotted.split(".")[-1]
        if last.endswith("GradScaler"):
            return True
        function = _enclosing_function(call, parents)
        # a local alias of the class (`scaler_type = GradScaler; scaler_type()`)
        scope = function if function is not None else None
        for node in ast.walk(scope) if scope is not None else ():
            if isinstance(node, ast.Assign) and (ast_dotted_name(node.value) or "").endswith("GradScaler"):
                if any(isinstance(t, ast.Name) and t.id == dotted for t in node.targets):
                    return True
        # a package function that returns a GradScaler construction on every path
        defs = self._definitions(last)
        return bool(defs) and all(_returns_a_scaler(d) for d, _, _ in defs)

    # --- one read of the scaler ------------------------------------------------------------------------
    def _use(self, node: ast.AST, parents) -> None:
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute):
            if parent.attr == "update":
                raise _Failed("update")
            self.scaled = self.scaled or parent.attr == "scale"
            return  # a protocol call (`.step(opt)`, `.scale(loss)`, `.state_dict()`) or a read of it
        if isinstance(parent, (ast.Compare, ast.FormattedValue, ast.Expr)):
            return
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            return
        if isinstance(parent, _TEST_PARENTS) and parent.test is node:
            return
        if isinstance(parent, ast.IfExp):
            if parent.test is node:
                return
            self._use(parent, parents)
            return
        if isinstance(parent, ast.BoolOp):
            self._use(parent, parents)  # `if a and x:` is a test; `y = x or z` hands x to y
            return
        if isinstance(parent, ast.keyword):
            call = parents.get(parent)
            if isinstance(call, ast.Call):
                self._passed(call, None, parent.arg, parents)
                return
        if isinstance(parent, ast.Call) and node is not parent.func and node in parent.args:
            self._passed(parent, parent.args.index(node), None, parents)
            return
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            for target in targets:
                self._flows_to(target, node, parents)
            return
        raise _Failed(type(parent).__name__)  # returned, yielded, put in a container, called, ...

    def _flows_to(self, target: ast.AST, node: ast.AST, parents) -> None:
        if isinstance(target, ast.Name):
            function = _enclosing_function(node, parents)
            if function is None:
                raise _Failed("a module-level name")
            self._follow_local(function, target.id, parents)
        elif isinstance(target, ast.Attribute):
            holder = _self_class(target, parents)
            self._hold(target.attr, self.family(holder) if holder is not None else None)
        else:
            raise _Failed("stored in a subscript or unpacked")

    def _follow_local(self, function: ast.AST, name: str, parents) -> None:
        key = (id(function), name)
        if key in self.followed:
            return
        self.followed.add(key)
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                self._use(node, parents)
            elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
                raise _Failed("a global")

    def _passed(self, call: ast.Call, position: Optional[int], keyword: Optional[str], parents) -> None:
        dotted = ast_dotted_name(call.func)
        if dotted in _READS_ONLY:
            return
        if dotted == "getattr" and position == 0 and len(call.args) >= 2:
            name = call.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value != "update":
                return  # `getattr(scaler, "_scale")`: a read of one attribute, not the update
        if keyword is None and any(isinstance(a, ast.Starred) for a in call.args[: (position or 0) + 1]):
            raise _Failed("a starred call")
        callee = _callee_name(call)
        defs = self._definitions(callee) if callee else []
        if not defs:
            raise _Failed(f"passed to {dotted or callee}")  # an unresolved call may do anything with it
        for function, is_method, callee_parents in defs:
            parameter = _parameter(function, is_method, position, keyword)
            if parameter is None:
                raise _Failed(f"{callee}: *args/**kwargs or no such parameter")
            self._follow_local(function, parameter, callee_parents)

    def _definitions(self, name: str) -> List[Tuple[ast.AST, bool, Dict[ast.AST, ast.AST]]]:
        """Every function named `name` in the package (a class: its `__init__`), with whether it is a method."""
        if name in self._defs:
            return self._defs[name]
        found: List[Tuple[ast.AST, bool, Dict[ast.AST, ast.AST]]] = []
        for path in self.package.naming(name):
            parsed = self.package.tree(path)
            if parsed is None:
                continue
            tree, parents = parsed
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    found.append((node, isinstance(parents.get(node), ast.ClassDef) and not _static(node), parents))
                elif isinstance(node, ast.ClassDef) and node.name == name:
                    inits = [b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"]
                    if not inits:
                        found.append((node, False, parents))  # an inherited constructor: unresolved
                    found.extend((i, True, parents) for i in inits)
        # a class without its own `__init__` makes the answer unknown
        self._defs[name] = [] if any(isinstance(d, ast.ClassDef) for d, _, _ in found) else found
        return self._defs[name]


def _static(function: ast.AST) -> bool:
    return any(ast_dotted_name(d) == "staticmethod" for d in getattr(function, "decorator_list", ()))


def _callee_name(call: ast.Call) -> Optional[str]:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _parameter(function: ast.AST, is_method: bool, position: Optional[int], keyword: Optional[str]) -> Optional[str]:
    arguments = function.args
    positional = [a.arg for a in arguments.posonlyargs + arguments.args]
    if is_method:
        positional = positional[1:]
    if keyword is not None:
        names = positional + [a.arg for a in arguments.kwonlyargs]
        return keyword if keyword in names else None
    if position is not None and position < len(positional):
        return positional[position]
    return None


def _parameter_names(function) -> Set[str]:
    arguments = function.args
    return {a.arg for a in arguments.posonlyargs + arguments.args + arguments.kwonlyargs}


def _enclosing_class(node: ast.AST, parents) -> Optional[ast.ClassDef]:
    current = parents.get(node)
    while current is not None and not isinstance(current, ast.ClassDef):
        current = parents.get(current)
    return current


def _base_names(node: ast.ClassDef) -> Set[str]:
    return {(ast_dotted_name(b) or "").split(".")[-1] for b in node.bases}


def _self_class(node: ast.Attribute, parents) -> Optional[str]:
    """The class whose method `node` (`self.x`) is in; None for another receiver or outside a method."""
    if not (isinstance(node.value, ast.Name) and node.value.id == "self"):
        return None
    function = _enclosing_function(node, parents)
    while function is not None and isinstance(function, ast.Lambda):
        function = _enclosing_function(function, parents)
    owner = parents.get(function) if function is not None else None
    return owner.name if isinstance(owner, ast.ClassDef) else None


def _enclosing_function(node: ast.AST, parents) -> Optional[ast.AST]:
    current = parents.get(node)
    while current is not None and not isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        current = parents.get(current)
    return current


def _returns_a_scaler(function: ast.AST) -> bool:
    returns = [n for n in ast.walk(function) if isinstance(n, ast.Return)]
    if not returns or not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for node in returns:
        call = node.value
        dotted = ast_dotted_name(call.func) if isinstance(call, ast.Call) else None
        if dotted is None or not dotted.split(".")[-1].endswith("GradScaler"):
            return False
    return True


def package_drives_alone(
    files: Iterable[str], attribute: str, class_name: Optional[str] = None, note_read: Optional[Callable[[str], None]] = None
) -> bool:
    """True when the package (`files`) builds the scaler it keeps in the attribute `attribute` on some path,
    scales losses with it, and nothing it can reach in the package updates it or hands it on (see the module's docstring)."""
    try:
        return _Reach(_Package(files, note_read)).run(attribute, class_name)
    except (_Failed, RecursionError):
        return False


def package_drives_alone_for(model, attribute: str, class_name: Optional[str] = None) -> bool:
    """For a rule: `package_drives_alone` over the checked file's project (its caller search set, the file
    itself included); False without a project or for a model that is not the checked file's."""
    import os

    from amp_lint.analysis.summaries import _ACTIVE

    if not _ACTIVE:
        return False
    provider = _ACTIVE[-1]
    if id(model) in provider._model_paths or not provider._building:
        return False
    checked = provider._building[0]
    files = provider._scan_set(checked)
    if not files:
        return False
    own = os.path.abspath(checked)
    return package_drives_alone(files if own in files else (*files, own), attribute, class_name, provider.index.note_read)
