"""Issue 26, principle 3 (open world: report what is proved): a library step through `self.<scaler>` with no
`update()` is AMP021 only when the package is the scaler's only driver. `analysis/scaler_reach.py` proves it
by data flow over the whole package: the scaler is built there (on some path), and every value it flows to
(locals, other attributes, parameters of package functions it is passed to) is only used by protocol calls
and tests; never updated, returned, exposed by a getter or a `getattr(obj, "<name>")`, or passed to a call
that does not resolve. These shapes are our own (a precision plugin, an optimizer wrapper)."""

from __future__ import annotations

import textwrap

from package_check import check_in_package, write_package

from amp_lint.analysis.scaler_reach import package_drives_alone

PLUGIN = """
import torch


class MixedPrecisionPlugin:
    def __init__(self, device, scaler=None):
        if scaler is None:
            scaler = torch.amp.GradScaler(device)
        if scaler is not None and device == "cpu":
            raise ValueError(f"no scaler on cpu, found {scaler}")
        self.scaler = scaler

    def backward(self, loss):
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def unscale(self, optimizer):
        scaler = self.scaler
        if scaler is not None:
            scaler.unscale_(optimizer)

    def optimizer_step(self, optimizer):
        out = self.scaler.step(optimizer)
        {update}
        return out

    def state_dict(self):
        return self.scaler.state_dict() if self.scaler is not None else {}
{extra}
"""


def _package(tmp_path, files):
    return write_package(tmp_path, files)


def _plugin(update="pass", extra=""):
    return PLUGIN.replace("{update}", update).replace("{extra}", extra)


def _check(tmp_path, files, target):
    _package(tmp_path, files)
    return check_in_package(tmp_path, f"pkg/{target}", "AMP021")


def test_a_plugin_that_builds_its_scaler_and_never_updates_it_is_amp021(tmp_path):
    # Built on the default path (no scaler passed); read through a local alias, a test, an f-string and
    # protocol calls only: nothing in the package can update it.
    assert _check(tmp_path, {"plugin.py": _plugin()}, "plugin.py") == [("AMP021", 24)]


def test_the_plugin_that_updates_is_silent(tmp_path):
    assert _check(tmp_path, {"plugin.py": _plugin("self.scaler.update()")}, "plugin.py") == []


# Principle 3: an accessor (a property, or a method taking only `self`) whose whole body returns the attribute
# is the same read as the public attribute: a view of the scaler the package drives, not a hand-over of
# driving. Its name holds the scaler too, and its readers in the package are followed like the attribute's.
def test_an_accessor_property_that_only_returns_the_scaler_keeps_the_proof(tmp_path):
    extra = "\n    @property\n    def grad_scaler(self):\n        \"\"\"The scaler.\"\"\"\n        return self.scaler\n"
    assert _check(tmp_path, {"plugin.py": _plugin(extra=extra)}, "plugin.py") == [("AMP021", 24)]
    # ... and a reader of the accessor that updates it is an update of this scaler
    (tmp_path / "upd").mkdir()
    loop = "def finish(plugin):\n    s = plugin.grad_scaler\n    s.update()\n"
    assert _check(tmp_path / "upd", {"plugin.py": _plugin(extra=extra), "loop.py": loop}, "plugin.py") == []
    # ... and so is a reader handing what the accessor returns to a call that does not resolve
    (tmp_path / "out").mkdir()
    loop = "from elsewhere import hand_over\n\n\ndef finish(plugin):\n    hand_over(plugin.grad_scaler)\n"
    assert _check(tmp_path / "out", {"plugin.py": _plugin(extra=extra), "loop.py": loop}, "plugin.py") == []
    # a cached_property is the same view
    cached = extra.replace("@property", "@functools.cached_property")
    (tmp_path / "cached").mkdir()
    assert _check(tmp_path / "cached", {"plugin.py": _plugin(extra=cached)}, "plugin.py") == [("AMP021", 24)]


def test_an_accessor_through_getattr_with_a_literal_name_keeps_the_proof(tmp_path):
    trainer = "class Trainer:\n    @property\n    def scaler(self):\n        return getattr(self.plugin, 'scaler', None)\n"
    assert _check(tmp_path, {"plugin.py": _plugin(), "trainer.py": trainer}, "plugin.py") == [("AMP021", 24)]
    # the trainer's own method updating what its property returns: the plugin's scaler
    updates = trainer + "\n    def finish(self):\n        self.scaler.update()\n"
    (tmp_path / "upd").mkdir()
    assert _check(tmp_path / "upd", {"plugin.py": _plugin(), "trainer.py": updates}, "plugin.py") == []


def test_a_scaler_returned_by_more_than_an_accessor_keeps_it_silent(tmp_path):
    # a method that takes arguments, a module-level factory, a body that does more than return it, an async
    # method, a decorator other than property: each may hand the scaler to whoever drives it
    shapes = {
        "args": "\n    def grad_scaler(self, name):\n        return self.scaler\n",
        "factory": "\n\ndef scaler_of(plugin):\n    return plugin.scaler\n",
        "more": "\n    def grad_scaler(self):\n        self.handed = True\n        return self.scaler\n",
        "async": "\n    async def grad_scaler(self):\n        return self.scaler\n",
        "decorated": "\n    @functools.lru_cache()\n    def grad_scaler(self):\n        return self.scaler\n",
    }
    for name, extra in shapes.items():
        (tmp_path / name).mkdir()
        assert _check(tmp_path / name, {"plugin.py": _plugin(extra=extra)}, "plugin.py") == [], name


def test_an_update_through_an_alias_elsewhere_keeps_it_silent(tmp_path):
    loop = "def finish(plugin):\n    s = plugin.scaler\n    if s is not None:\n        s.update()\n"
    assert _check(tmp_path, {"plugin.py": _plugin(), "loop.py": loop}, "plugin.py") == []


def test_a_scaler_only_passed_in_by_users_is_silent(tmp_path):
    # Never built in the package: the user who built it may update it.
    text = _plugin().replace("            scaler = torch.amp.GradScaler(device)\n", "            raise ValueError('pass a scaler')\n")
    assert _check(tmp_path, {"plugin.py": text}, "plugin.py") == []


WRAPPER = """
class WrappedOptimizer:
    def __init__(self, optimizer, scaler=None):
        self.optimizer = optimizer
        self.scaler = scaler

    def step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
        else:
            self.optimizer.step()
"""

OWNER = """
import torch
from pkg.wrapper import WrappedOptimizer
from pkg.saving import save_state


class Engine:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def prepare(self, optimizer):
        scaler = self.scaler
        return WrappedOptimizer(optimizer, scaler=scaler)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def save(self, folder):
        save_state(folder, self.scaler)
"""

SAVING = """
import torch


def save_state(folder, scaler=None):
    if scaler is not None:
        torch.save(scaler.state_dict(), folder + "/scaler.pt")
"""


def test_a_scaler_passed_to_package_functions_that_only_run_the_protocol_is_followed(tmp_path):
    # The engine builds it and passes it to a wrapper's constructor and a save function of the package:
    # both resolve, and each only stores it or reads its state: the wrapper's step without update is proved.
    files = {"wrapper.py": WRAPPER, "engine.py": OWNER, "saving.py": SAVING}
    assert _check(tmp_path, files, "wrapper.py") == [("AMP021", 9)]


def test_a_pass_to_a_function_that_updates_or_to_an_unresolved_call_keeps_it_silent(tmp_path):
    updates = SAVING.replace("torch.save(scaler.state_dict(), folder + \"/scaler.pt\")", "scaler.update()")
    files = {"wrapper.py": WRAPPER, "engine.py": OWNER, "saving.py": updates}
    assert _check(tmp_path, files, "wrapper.py") == []
    # `save_state` now comes from outside the package: the call may do anything with the scaler.
    unresolved = OWNER.replace("from pkg.saving import save_state", "from elsewhere import save_state")
    (tmp_path / "other").mkdir()
    files = {"wrapper.py": WRAPPER, "engine.py": unresolved}
    assert _check(tmp_path / "other", files, "wrapper.py") == []


def test_the_proof_itself(tmp_path):
    files = _package(tmp_path, {"wrapper.py": WRAPPER, "engine.py": OWNER, "saving.py": SAVING})
    assert package_drives_alone(files, "scaler") is True
    # an argument-less accessor returning it: a view; its callers' uses are followed
    accessor = textwrap.dedent(OWNER) + "\n    def get(self):\n        return self.scaler\n"
    (tmp_path / "pkg" / "engine.py").write_text(accessor)
    assert package_drives_alone(files, "scaler") is True
    (tmp_path / "pkg" / "engine.py").write_text(accessor + "\n    def end(self):\n        self.get().update()\n")
    assert package_drives_alone(files, "scaler") is False
    (tmp_path / "pkg" / "engine.py").write_text(accessor + "\n    def end(self):\n        return [self.get()]\n")
    assert package_drives_alone(files, "scaler") is False
    (tmp_path / "pkg" / "engine.py").write_text(accessor + "\n    def end(self):\n        hand_over(self.get)\n")
    assert package_drives_alone(files, "scaler") is False  # the bound accessor itself, to an unresolved call
    # handed out: returned from a method that takes arguments
    (tmp_path / "pkg" / "engine.py").write_text(textwrap.dedent(OWNER) + "\n    def get(self, key):\n        return self.scaler\n")
    assert package_drives_alone(files, "scaler") is False
    # passed to a call that does not resolve
    (tmp_path / "pkg" / "engine.py").write_text(textwrap.dedent(OWNER) + "\n    def end(self):\n        hand_over(self.scaler)\n")
    assert package_drives_alone(files, "scaler") is False
    # put in a container
    (tmp_path / "pkg" / "engine.py").write_text(textwrap.dedent(OWNER) + "\n    def all(self):\n        return [self.scaler]\n")
    assert package_drives_alone(files, "scaler") is False


def test_a_scaler_the_package_only_steps_is_left_to_its_users(tmp_path):
    # Nothing in the package scales a loss with it: its users must use the scaler themselves (to scale),
    # so they may update it too.
    text = _plugin().replace("            loss = self.scaler.scale(loss)\n", "            loss = loss * 1.0\n")
    assert _check(tmp_path, {"plugin.py": text}, "plugin.py") == []


SIBLING = """
import torch


class Base:
    pass


class OtherPlugin(Base):
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()
"""


def test_a_sibling_class_updating_its_own_attribute_of_that_name_is_not_this_scaler(tmp_path):
    # `self.scaler` in a method of a class unrelated by inheritance (a sibling under a shared base) is that
    # class's own scaler: its update() is not an update of the plugin's.
    plugin = _plugin().replace("class MixedPrecisionPlugin:", "from pkg.other import Base\n\n\nclass MixedPrecisionPlugin(Base):")
    assert _check(tmp_path, {"plugin.py": plugin, "other.py": SIBLING}, "plugin.py") == [("AMP021", 27)]


def test_a_subclass_or_any_other_object_updating_it_keeps_it_silent(tmp_path):
    sub = "from pkg.plugin import MixedPrecisionPlugin\n\n\nclass Sub(MixedPrecisionPlugin):\n    def finish(self):\n        self.scaler.update()\n"
    assert _check(tmp_path / "", {"plugin.py": _plugin(), "sub.py": sub}, "plugin.py") == []


def test_the_scaler_a_constructor_is_given_is_followed_back_to_its_holder(tmp_path):
    # The wrapper's scaler comes from `Engine.scaler`: an accessor on the engine is a view of it; a method
    # that takes arguments and returns it hands it out.
    getter = OWNER + "\n    @property\n    def grad_scaler(self):\n        return self.scaler\n"
    files = {"wrapper.py": WRAPPER, "engine.py": getter, "saving.py": SAVING}
    assert _check(tmp_path, files, "wrapper.py") == [("AMP021", 9)]
    (tmp_path / "args").mkdir()
    files["engine.py"] = OWNER + "\n    def grad_scaler(self, which):\n        return self.scaler\n"
    assert _check(tmp_path / "args", files, "wrapper.py") == []
    # the engine's attribute under another name: found only by following the constructor's callers back
    renamed = OWNER.replace("self.scaler", "self.amp").replace("scaler = self.amp", "scaler = self.amp")
    (tmp_path / "renamed").mkdir()
    assert _check(tmp_path / "renamed", {"wrapper.py": WRAPPER, "engine.py": renamed, "saving.py": SAVING}, "wrapper.py") == [("AMP021", 9)]
    exposed = renamed + "\n    def grad_scaler(self, which=None):\n        return self.amp\n"
    (tmp_path / "exposed").mkdir()
    assert _check(tmp_path / "exposed", {"wrapper.py": WRAPPER, "engine.py": exposed, "saving.py": SAVING}, "wrapper.py") == []


def test_a_cached_result_follows_an_edit_in_a_module_the_proof_read(tmp_path):
    # The proof reads saving.py (where the scaler goes as `scaler`, a name wrapper.py never uses): the wrapper's
    # stored result depends on it, so making save_state update the scaler re-checks the wrapper and AMP021 goes.
    _package(tmp_path, {"wrapper.py": WRAPPER, "engine.py": OWNER, "saving.py": SAVING})
    cache = tmp_path / "cache"

    def warm_check():
        return check_in_package(tmp_path, "pkg/wrapper.py", "AMP021", ("--cache-dir", str(cache)))

    assert warm_check() == [("AMP021", 9)]
    assert warm_check() == [("AMP021", 9)]  # from the cache
    saving = tmp_path / "pkg" / "saving.py"
    saving.write_text(textwrap.dedent(SAVING.replace('torch.save(scaler.state_dict(), folder + "/scaler.pt")', "scaler.update()")))
    assert warm_check() == []


# Principle 3 (open world, report what is proved) with class identity: a class is its module and its name,
# its bases resolved through the imports of the module that names them. A class of the same name in another
# module (a second framework in the same distribution keeping its own plugin of that name) is another class:
# its update() of its own `self.scaler` does not update this one's. Where a base does not resolve to one
# package class, it may be this class: silent.
FRAMEWORK_BASE = "class Precision:\n    pass\n"
OTHER_BASE = "from pkg.core.precision import Precision as CorePrecision\n\n\nclass Precision(CorePrecision):\n    pass\n"
OTHER_PLUGIN = """
import torch
{imports}


class MixedPrecisionPlugin({base}):
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def optimizer_step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()
"""


def _layered(tmp_path, other_imports, other_base, trainer=None):
    core = _plugin().replace("import torch\n", "import torch\nfrom pkg.core.precision import Precision\n", 1)
    core = core.replace("class MixedPrecisionPlugin:", "class MixedPrecisionPlugin(Precision):")
    for sub in ("core", "trainers"):
        (tmp_path / "pkg" / sub).mkdir(parents=True, exist_ok=True)
    files = {
        "core/__init__.py": "",
        "trainers/__init__.py": "",
        "core/precision.py": FRAMEWORK_BASE,
        "core/amp.py": core,
        "trainers/precision.py": OTHER_BASE,
        "trainers/amp.py": OTHER_PLUGIN.replace("{imports}", other_imports).replace("{base}", other_base),
    }
    if trainer is not None:
        files["trainers/trainer.py"] = trainer
    step_line = core.splitlines().index("        out = self.scaler.step(optimizer)") + 1
    return _check(tmp_path, files, "core/amp.py"), step_line


def test_a_class_of_the_same_name_in_another_module_is_another_class(tmp_path):
    found, line = _layered(tmp_path, "from pkg.trainers.precision import Precision", "Precision")
    assert found == [("AMP021", line)]


def test_a_real_subclass_in_another_module_still_counts(tmp_path):
    # the other module's class inherits this one (imported under another name): its update() may be ours
    found, _ = _layered(tmp_path, "from pkg.core.amp import MixedPrecisionPlugin as CoreMixed", "CoreMixed")
    assert found == []


def test_a_base_that_does_not_resolve_in_the_package_may_be_the_class(tmp_path):
    # `from elsewhere import ...`: which class it is cannot be proved, so its update() may be ours
    found, _ = _layered(tmp_path, "from elsewhere import MixedPrecisionPlugin as Base", "Base")
    assert found == []


TRAINER = """
from pkg.{module}.precision import Precision


class Trainer:
    @property
    def precision_plugin(self) -> {annotation}:
        return self._plugin

    @property
    def scaler(self):
        return getattr(self.precision_plugin, "scaler", None)

    def finish(self):
        if self.scaler is not None:
            self.scaler.update()
"""


def test_a_getattr_on_an_object_declared_of_an_unrelated_class_does_not_hand_it_out(tmp_path):
    # the trainer exposes and updates the scaler of its own framework's plugin (declared `-> Precision` of the
    # other module, a sibling of this plugin's base): not this plugin's scaler
    trainer = TRAINER.format(module="trainers", annotation="Precision")
    found, line = _layered(tmp_path, "from pkg.trainers.precision import Precision", "Precision", trainer)
    assert found == [("AMP021", line)]


def test_a_getattr_on_an_object_that_may_be_the_holder_keeps_it_silent(tmp_path):
    # declared as this plugin's base (it may be this plugin), or declared with no annotation, or in a string
    # that is not one class: the getattr may read this scaler, and the trainer's finish() updates what it read
    for name, annotation in (("base", "Precision"), ("none", "Optional[Precision]")):
        trainer = TRAINER.format(module="core", annotation=annotation)
        root = tmp_path / name
        root.mkdir()
        found, _ = _layered(root, "from pkg.trainers.precision import Precision", "Precision", trainer)
        assert found == [], name
    trainer = TRAINER.format(module="trainers", annotation="Precision").replace(" -> Precision", "")
    (tmp_path / "bare").mkdir()
    assert _layered(tmp_path / "bare", "from pkg.trainers.precision import Precision", "Precision", trainer)[0] == []


def test_an_accessor_on_an_object_that_may_be_the_holder_is_a_view(tmp_path):
    # the same trainer without finish(): its property only exposes the plugin's scaler (the package builds,
    # scales and steps it), so the plugin's step without update is still proved
    trainer = TRAINER.format(module="core", annotation="Precision")
    trainer = trainer[: trainer.index("    def finish")]
    found, line = _layered(tmp_path, "from pkg.trainers.precision import Precision", "Precision", trainer)
    assert found == [("AMP021", line)]
