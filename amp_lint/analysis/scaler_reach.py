"""Where a scaler held in an attribute can go, followed by data flow through the whole package (issue 26,
principle 3: open world, report what is proved).

A step through `self.<attribute>` with no `update()` in its function is a finding only when no caller can
supply the update. That is proved when the package is the scaler's only driver:

- the package scales losses with it (`.scale(loss)`): a scaler the package only steps must be driven by its
  users (they scale through it), who may update it too;
- the attribute is bound to a GradScaler the package builds (a `*GradScaler(...)` call, a local alias of the
  class, or a package function that returns such a call on every path), directly or through locals,
  on at least one path (a scaler a user may pass in instead does not undo the path where it is built);
- every read of the attribute, anywhere in the package, on any object but `self` in a class unrelated to the
  holder (a class is its module and its name, its bases resolved through imports: `package_files.py`; a base
  that does not resolve may be any class of its name), and of every value it flows to (a local, another attribute, a
  parameter of a package function it is passed to) is a protocol call or a read that cannot reach
  `update`: a method or attribute other than `update`, a test (`is None`, `if x:`), a formatted value,
  `isinstance`/`type`/`id`/`hasattr`/`getattr(x, "<not update>")`;
- it is never `update`d, returned (but by an accessor, below), yielded, put in a container, called, passed
  to a call that does not resolve to a package function whose parameter is followed in turn, or named in a
  string other than `getattr(obj, "<attribute>")` (whose result is followed as the scaler; `attrgetter`
  fails), unless that object is `self.<property>` declared to return a package class outside the holder's
  family (then it is another scaler, not followed).

The attribute itself being public does not count as handing the scaler out (a user who reads
`plugin.scaler` does not drive the protocol the package drives). An accessor is the same read: a method
of a class taking only `self` (undecorated, or a `property`/`cached_property`) whose whole body returns the
scaler (`return self._scaler`, `return getattr(self.plugin, "scaler", None)`). Its name becomes one more
attribute holding the scaler (for a plain method, `x.name()` is the read), so the package's readers of it
are followed like the attribute's. Anything else the package returns it from (a method that takes
arguments, a factory function, a body that does more) hands it out.
Only `ast` and the file system are used, so the answer costs a parse of the files that name the attribute.
"""

from __future__ import annotations

import ast
import os
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Set, Tuple

from amp_lint.analysis.package_files import ClassId, PackageFiles, member
from amp_lint.analysis.project import ast_dotted_name
from amp_lint.analysis.project_hooks import ACTIVE

_READS_ONLY = frozenset({"isinstance", "type", "id", "hasattr", "callable", "str", "repr", "bool"})
_TEST_PARENTS = (ast.If, ast.While, ast.Assert)


class _Failed(Exception):
    """The scaler may reach something that could update it."""


class _Reach:
    def __init__(self, package: PackageFiles) -> None:
        self.package = package
        self.attributes: List[str] = []
        # attribute -> the classes (see ClassId) whose `self.<attribute>` may hold the scaler (None: any object's)
        self.holders: Dict[str, Optional[Set[ClassId]]] = {}
        self._families: Dict[ClassId, Set[ClassId]] = {}
        self._resolved: Dict[Tuple[str, str], Optional[ClassId]] = {}
        self.followed: Set[Tuple[int, str]] = set()  # (id of a function node, local name)
        self.accessors: Set[str] = set()  # argument-less methods that only return the scaler (see _accessor_returns)
        self.built = False
        self.scaled = False  # the package scales losses with it: its users need not touch the scaler
        self._defs: Dict[str, List[Tuple[ast.AST, bool, Dict[ast.AST, ast.AST]]]] = {}

    # --- the attributes the scaler is stored in --------------------------------------------------------
    def run(self, attribute: str, class_name: Optional[str] = None, class_path: Optional[str] = None) -> bool:
        self.attributes.append(attribute)
        self.holders[attribute] = self.family((class_path, class_name)) if class_name else None
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
                    if not self._may_hold(node, attribute, path, parents):
                        continue  # `self.<attribute>` of a class unrelated to the scaler's holders
                    if isinstance(node.ctx, ast.Load):
                        self._use(node, parents)
                    elif isinstance(node.ctx, ast.Store):
                        self._stored(node, parents)
                elif isinstance(node, ast.Constant) and node.value == attribute:
                    self._named_in_string(node, parents)

    def _may_hold(self, node: ast.Attribute, attribute: str, path: str, parents) -> bool:
        """Can `node` (`x.<attribute>`) be the scaler? Any object's attribute can, except `self.<attribute>` in a
        method of a class that is neither a holder nor related to one by inheritance (lightning's
        FSDPPrecision keeps its own `self.scaler` beside MixedPrecision's)."""
        classes = self.holders.get(attribute)
        if classes is None:
            return True
        holder = _self_class(node, parents)
        return holder is None or member((path, holder), classes)

    def family(self, identity: ClassId) -> Set[ClassId]:
        """The classes whose methods may run on an instance of the class `identity`: its subclasses, and the
        bases of it and of them, transitively; not a sibling class (another subclass of a shared base) unless
        a subclass inherits from it too. A class is its module and its name (issue 26, principle 3: a class of
        the same name in another module, lightning.pytorch's MixedPrecision beside lightning.fabric's, is
        another class); a base is resolved through the imports of the module that names it, and one that
        does not resolve in the package is any class of that name (conservative)."""
        if identity in self._families:
            return self._families[identity]
        down, todo = {identity}, [identity]
        while todo and len(down) < 64:
            current = todo.pop()
            for path, node in self._classes_naming(current[1]):
                if (path, node.name) in down or (None, node.name) in down:
                    continue
                if any(member(base, {current}) for base in self._bases(path, node)):
                    down.add((path, node.name))
                    todo.append((path, node.name))
        family, todo = set(down), list(down)
        while todo and len(family) < 128:
            current = todo.pop()
            for path, node in self._classes_naming(current[1]):
                if node.name == current[1] and member((path, node.name), {current}):
                    for base in self._bases(path, node):
                        if base[1] not in ("", "object") and base not in family:
                            family.add(base)
                            todo.append(base)
        self._families[identity] = family
        return family

    def _classes_naming(self, name: str) -> Iterator[Tuple[str, ast.ClassDef]]:
        for path in self.package.naming(name):
            parsed = self.package.tree(path)
            if parsed is not None:
                yield from ((path, n) for n in ast.walk(parsed[0]) if isinstance(n, ast.ClassDef))

    def _bases(self, path: str, node: ast.ClassDef) -> List[ClassId]:
        bases = []
        for base in node.bases:
            dotted = ast_dotted_name(base) or ""
            if "." in dotted or not dotted:
                bases.append((None, dotted.split(".")[-1]))  # `module.Class`: not resolved here
            else:
                bases.append(self.package.resolve_class(path, dotted) or (None, dotted))
        return bases

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
                if self._declared_elsewhere(call.args[0], node.value, parents):
                    return
                self._use(call, parents)  # `getattr(obj, "scaler", None)`: its result is the scaler
                return
            raise _Failed(f"{name}(... {node.value!r})")
        # a docstring, a log message, a dict key: not a way to the object

    def _declared_elsewhere(self, value: ast.AST, attribute: str, parents) -> bool:
        """Is `value` (`self.<prop>`) declared to be of a class that cannot hold the scaler: `<prop>` a property
        of the enclosing class whose return annotation names a package class outside every holder's family
        (lightning.pytorch's `Trainer.precision_plugin -> Precision`, not lightning.fabric's plugin)? Any
        other object, an annotation that does not resolve to one package class, or a holder: not proved."""
        classes = self.holders.get(attribute)
        if classes is None or not isinstance(value, ast.Attribute) or _self_class(value, parents) is None:
            return False
        owner = _enclosing_class(_enclosing_function(value, parents), parents)
        path = self.package.path_of(parents)
        getters = [
            f
            for f in (owner.body if owner is not None else ())
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == value.attr
        ]
        if path is None or len(getters) != 1 or not any(ast_dotted_name(d) == "property" for d in getters[0].decorator_list):
            return False
        returns = getters[0].returns
        if isinstance(returns, ast.Constant) and isinstance(returns.value, str) and returns.value.isidentifier():
            declared = returns.value
        elif isinstance(returns, ast.Name):
            declared = returns.id
        else:
            return False
        identity = self.package.resolve_class(path, declared)
        return identity is not None and identity[0] is not None and not member(identity, classes)

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
            self._hold(value.attr, self.family((self.package.path_of(parents), holder)) if holder is not None else None)
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
        if isinstance(parent, ast.Return) and parent.value is node and self._accessor_returns(parent, parents):
            return
        if isinstance(parent, ast.Call) and node is parent.func and not parent.args and not parent.keywords:
            if isinstance(node, ast.Attribute) and node.attr in self.accessors:
                self._use(parent, parents)  # `x.get_scaler()`: the accessor's result is the scaler itself
                return
        raise _Failed(type(parent).__name__)  # returned, yielded, put in a container, called, ...

    def _accessor_returns(self, statement: ast.Return, parents) -> bool:
        """Is `statement` the whole body of an accessor, a method of a class that takes only `self` and
        only returns the scaler (a `@property`, or a plain method called with no arguments)? Its result is
        the same object the attribute holds, read the same way: a view, not a hand-over of driving. The
        accessor's name becomes one more attribute of that class holding the scaler, so its readers in the
        package are followed like the attribute's."""
        function = parents.get(statement)
        owner = parents.get(function) if function is not None else None
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or not isinstance(owner, ast.ClassDef):
            return False
        if isinstance(function, ast.AsyncFunctionDef):
            return False  # its call returns a coroutine, not the scaler
        arguments = function.args
        if arguments.vararg or arguments.kwarg or arguments.kwonlyargs or len(arguments.posonlyargs + arguments.args) != 1:
            return False
        body = function.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body = body[1:]
        if body != [statement]:
            return False
        decorators = [(ast_dotted_name(d) or "").split(".")[-1] for d in function.decorator_list]
        if decorators and decorators not in (["property"], ["cached_property"]):
            return False
        path = self.package.path_of(parents)
        if not decorators:
            self.accessors.add(function.name)
        self._hold(function.name, self.family((path, owner.name)))
        return True

    def _flows_to(self, target: ast.AST, node: ast.AST, parents) -> None:
        if isinstance(target, ast.Name):
            function = _enclosing_function(node, parents)
            if function is None:
                raise _Failed("a module-level name")
            self._follow_local(function, target.id, parents)
        elif isinstance(target, ast.Attribute):
            holder = _self_class(target, parents)
            self._hold(target.attr, self.family((self.package.path_of(parents), holder)) if holder is not None else None)
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
    files: Iterable[str],
    attribute: str,
    class_name: Optional[str] = None,
    note_read: Optional[Callable[[str], None]] = None,
    class_path: Optional[str] = None,
) -> bool:
    """True when the package (`files`) builds the scaler it keeps in the attribute `attribute` on some path,
    scales losses with it, and nothing it can reach in the package updates it or hands it on (see the module's
    docstring). The holder is the class `class_name` of the module `class_path` (None: every class of that name)."""
    files = tuple(dict.fromkeys(os.path.abspath(f) for f in files))
    class_path = os.path.abspath(class_path) if class_path else None
    try:
        return _Reach(PackageFiles(files, note_read)).run(attribute, class_name, class_path)
    except (_Failed, RecursionError):
        return False


def package_drives_alone_for(model, attribute: str, class_name: Optional[str] = None) -> bool:
    """For a rule: `package_drives_alone` over the checked file's project (its caller search set, the file
    itself included); False without a project or for a model that is not the checked file's."""
    if not ACTIVE:
        return False
    provider = ACTIVE[-1]
    if id(model) in provider._model_paths or not provider._building:
        return False
    checked = provider._building[0]
    files = provider._scan_set(checked)
    if not files:
        return False
    own = os.path.abspath(checked)
    return package_drives_alone(files if own in files else (*files, own), attribute, class_name, provider.index.note_read, own)
