"""Where the guard meets torch: the entry points it wraps so that each call reaches the monitor.

:func:`install` wraps, for the whole process until :func:`uninstall`:

* ``torch.amp.GradScaler``'s ``__init__``, ``scale``, ``unscale_``, ``step``, ``update`` and ``load_state_dict``
  (``torch.cuda.amp.GradScaler`` derives from it); a disabled scaler is left alone;
* ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` (also under ``torch.nn.utils.clip_grad``), which see
  the parameters they clip;
* ``torch.autograd.backward`` (which ``Tensor.backward`` calls), to see a backward inside an enabled autocast;
* ``torch.optim.Optimizer.zero_grad``;
* with ``grad_reads=True``, ``Tensor.grad`` reads made by the user's code (not torch's), checked only while a scaler
  holds scaled gradients. It is off by default: a read cannot be told from a scale-free use of it
  (``p.grad is None``, ``torch.isfinite(p.grad)``), and it costs a Python call on every ``.grad`` read.

Each hook does its check *before* the call it wraps, so that mode ``raise`` stops the run with the rule's message
before torch raises its own, less telling, error. The call site is the first frame outside torch and amp_lint.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from typing import Any

from amp_lint.guard.monitor import ProtocolMonitor, Site
from amp_lint.guard.report import GuardReport

#: Read the scale (a device synchronisation on CUDA) after every this many updates, to see it collapse.
SCALE_CHECK_EVERY = 32

_GUARD_DIR = os.path.dirname(os.path.abspath(__file__))
_AMP_LINT_DIR = os.path.dirname(_GUARD_DIR)


class _Installed:
    def __init__(self, monitor: ProtocolMonitor, report: GuardReport, restore: list[tuple[Any, str, Any]]) -> None:
        self.monitor, self.report, self.restore = monitor, report, restore


_installed: _Installed | None = None

#: The training scripts bundled with amp-lint (for `amp-lint verify`) are user code, though inside the package.
_BUNDLED_SCRIPTS = os.path.join(_AMP_LINT_DIR, "verify", "scripts")


def _is_own(filename: str) -> bool:
    return filename.startswith(_AMP_LINT_DIR) and not filename.startswith(_BUNDLED_SCRIPTS)


def installed_report() -> GuardReport | None:
    return _installed.report if _installed is not None else None


def user_site(depth: int = 2) -> Site:
    """The first frame, from ``depth`` up, that is neither torch's nor amp_lint's: the user's call."""
    frame = sys._getframe(depth)
    torch_dir = _torch_dir()
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith((torch_dir, "<frozen")) or _is_own(filename)):
            return filename, frame.f_lineno
        frame = frame.f_back
    return None


@functools.lru_cache(maxsize=1)
def _torch_dir() -> str:
    import torch

    return os.path.dirname(os.path.abspath(torch.__file__))


def install(mode: str = "warn", *, grad_reads: bool = False, only_wrapped: bool = False) -> GuardReport:
    """Start guarding every (enabled) GradScaler of this process; returns the report the breaches go to.

    With ``only_wrapped``, only the scalers given to :func:`wrap` are followed. Installing again replaces the
    earlier guard (its report is returned by :func:`uninstall`).
    """
    import torch

    uninstall()
    report = GuardReport(mode)
    monitor = ProtocolMonitor(report)
    if only_wrapped:
        monitor.only = weakref.WeakSet()
    restore: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, make: Any) -> None:
        original = getattr(owner, name)
        restore.append((owner, name, original))
        setattr(owner, name, functools.wraps(original)(make(original)))

    scaler_class = torch.amp.GradScaler

    def init(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            if monitor.follows(self):
                monitor.on_scaler_built(self, user_site())

        return wrapper

    def scale(original: Any) -> Any:
        def wrapper(self: Any, outputs: Any) -> Any:
            if monitor.follows(self):
                monitor.on_scale(self, user_site())
            return original(self, outputs)

        return wrapper

    def unscale(original: Any) -> Any:
        def wrapper(self: Any, optimizer: Any) -> Any:
            if monitor.follows(self) and not monitor.inside_scaler:  # step() calls unscale_() itself
                monitor.on_unscale(self, optimizer, user_site())
            return original(self, optimizer)

        return wrapper

    def step(original: Any) -> Any:
        def wrapper(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not monitor.follows(self):
                return original(self, optimizer, *args, **kwargs)
            monitor.on_step(self, optimizer, user_site())
            monitor.inside_scaler = True
            try:
                return original(self, optimizer, *args, **kwargs)
            finally:
                monitor.inside_scaler = False

        return wrapper

    def update(original: Any) -> Any:
        def wrapper(self: Any, new_scale: Any = None) -> Any:
            if not monitor.follows(self):
                return original(self, new_scale)
            monitor.on_update(self, user_site(), new_scale=new_scale is not None)
            result = original(self, new_scale)
            state = monitor._scaler(self)
            if state.updates % SCALE_CHECK_EVERY == 0 and getattr(self, "_scale", None) is not None:
                monitor.on_scale_value(self, float(self._scale))
            return result

        return wrapper

    def load_state_dict(original: Any) -> Any:
        def wrapper(self: Any, state_dict: Any) -> Any:
            result = original(self, state_dict)
            monitor.on_scaler_loaded(self)
            return result

        return wrapper

    def clip(original: Any) -> Any:
        def wrapper(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(parameters, torch.Tensor):
                parameters = [parameters]
            else:
                parameters = list(parameters)  # a generator is read once: keep it for the call
            monitor.on_clip(parameters, user_site())
            return original(parameters, *args, **kwargs)

        return wrapper

    def backward(original: Any) -> Any:
        def wrapper(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            autocast = _enabled_autocast(torch, tensors)
            monitor.on_backward(autocast, user_site() if autocast is not None else None)
            return original(tensors, *args, **kwargs)

        return wrapper

    def zero_grad(original: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            monitor.on_zero_grad(self, user_site())
            return original(self, *args, **kwargs)

        return wrapper

    patch(scaler_class, "__init__", init)
    patch(scaler_class, "scale", scale)
    patch(scaler_class, "unscale_", unscale)
    patch(scaler_class, "step", step)
    patch(scaler_class, "update", update)
    patch(scaler_class, "load_state_dict", load_state_dict)
    clip_module = torch.nn.utils.clip_grad
    for name in ("clip_grad_norm_", "clip_grad_value_"):
        shared = getattr(torch.nn.utils, name) is getattr(clip_module, name)
        patch(clip_module, name, clip)
        if shared:
            restore.append((torch.nn.utils, name, getattr(torch.nn.utils, name)))
            setattr(torch.nn.utils, name, getattr(clip_module, name))
    patch(torch.autograd, "backward", backward)
    patch(torch.optim.Optimizer, "zero_grad", zero_grad)
    if grad_reads:
        _patch_grad_reads(torch, monitor, restore)

    global _installed
    _installed = _Installed(monitor, report, restore)
    return report


def wrap(scaler: Any, mode: str = "warn", *, grad_reads: bool = False) -> Any:
    """Guard this one GradScaler (the hooks are installed for it if no guard is); returns the scaler itself."""
    if _installed is None:
        install(mode, grad_reads=grad_reads, only_wrapped=True)
    assert _installed is not None
    monitor = _installed.monitor
    if monitor.only is not None:
        monitor.only.add(scaler)
    return scaler


def uninstall() -> GuardReport | None:
    """Stop guarding and put torch back as it was; returns the report of the guard that was installed."""
    global _installed
    if _installed is None:
        return None
    for owner, name, original in reversed(_installed.restore):
        if name == "grad" and original is None:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    report, _installed = _installed.report, None
    return report


def _enabled_autocast(torch: Any, tensors: Any) -> str | None:
    """``torch.autocast("cpu", dtype=torch.bfloat16)`` when the tensor's device has autocast on, else None."""
    tensor = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
    if not isinstance(tensor, torch.Tensor):
        return None
    device = tensor.device.type
    try:
        if not torch.is_autocast_enabled(device):
            return None
        dtype = torch.get_autocast_dtype(device)
    except (RuntimeError, TypeError):  # a device type autocast does not know
        return None
    return f'torch.autocast("{device}", dtype={dtype})'


def _patch_grad_reads(torch: Any, monitor: ProtocolMonitor, restore: list[tuple[Any, str, Any]]) -> None:
    base = torch._C.TensorBase.grad
    torch_dir = _torch_dir()

    def get(self: Any) -> Any:
        if monitor.wants_grad_reads() and self.requires_grad:
            frame = sys._getframe(1)
            filename = frame.f_code.co_filename
            if not (filename.startswith(torch_dir) or _is_own(filename)) and not _is_none_test(frame):
                monitor.on_grad_read(self, (filename, frame.f_lineno))
        return base.__get__(self)

    restore.append((torch.Tensor, "grad", torch.Tensor.__dict__.get("grad")))
    torch.Tensor.grad = property(get, base.__set__, base.__delete__, base.__doc__)


def _is_none_test(frame: Any) -> bool:
    """Whether the ``.grad`` just read is compared with None (``p.grad is None``): that does not depend on the scale."""
    return _none_test_at(frame.f_code, frame.f_lasti)


@functools.lru_cache(maxsize=4096)
def _none_test_at(code: Any, offset: int) -> bool:
    """Whether the instruction after ``offset`` (the ``.grad`` load) tests the value against None: a jump on None
    (``if p.grad is not None``, compiled so since Python 3.11) or ``LOAD_CONST None`` and an ``is`` / ``==``."""
    import dis

    following = [instruction for instruction in dis.get_instructions(code) if instruction.offset > offset][:2]
    if not following:
        return False
    if following[0].opname.endswith(("IF_NONE", "IF_NOT_NONE")):
        return True
    return (
        len(following) == 2
        and (following[0].opname, following[0].argval) == ("LOAD_CONST", None)
        and following[1].opname in ("IS_OP", "COMPARE_OP")
    )


__all__ = ["SCALE_CHECK_EVERY", "install", "installed_report", "uninstall", "user_site", "wrap"]
