"""What is known about a value: the alternatives that the value resolution (`values`) answers with.

A `Value` is a tuple of alternatives (`Atom`s), one per definition that may reach an expression. An
alternative is a known literal (`"cuda:0"`, `torch.float16`, `True`), a known *kind* with what is known
about it ("a torch.device", "a device string that may carry an index"), or unknown (`UNKNOWN`). Rules ask
their question of every alternative and stay silent when one is unknown. `device_string` reads a string
literal as a device; `join_values` and `map_atoms` combine and transform alternatives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Tuple

import libcst as cst

class Kind(enum.Enum):
    UNKNOWN = "unknown"
    STRING = "str"
    DEVICE = "torch.device"
    DTYPE = "torch.dtype"
    BOOL = "bool"
    NUMBER = "number"
    NONE = "None"


class Index(enum.Enum):
    """Whether a device (or a device string) carries an index (`cuda:0`)."""

    NO = "no"
    YES = "yes"
    MAYBE = "maybe"


TORCH_DTYPES = frozenset(
    {
        "torch.float16",
        "torch.half",
        "torch.bfloat16",
        "torch.float32",
        "torch.float",
        "torch.float64",
        "torch.double",
        "torch.int8",
        "torch.uint8",
        "torch.int16",
        "torch.short",
        "torch.int32",
        "torch.int",
        "torch.int64",
        "torch.long",
        "torch.bool",
        "torch.complex64",
        "torch.complex128",
        "torch.float8_e4m3fn",
        "torch.float8_e5m2",
    }
)


@dataclass(frozen=True)
class Atom:
    """One alternative of a value."""

    kind: Kind
    literal: object = None  # the text of a str, a dtype's qualified name, a bool
    device_type: Optional[str] = None  # devices and device strings: "cuda"
    index: Index = Index.MAYBE  # devices and device strings
    certain: bool = True  # False: the kind rests on a guess (`x.device` of an object nobody knows)
    stringified: bool = False  # made by str() (or an f-string) of a torch.device (`str(x.device)`)
    without_cuda: bool = False  # only taken where CUDA is not available (`... else "cpu"`)
    defined_at: Optional[cst.CSTNode] = field(default=None, compare=False, repr=False)  # the definition it came from

    @property
    def is_unknown(self) -> bool:
        return self.kind is Kind.UNKNOWN


UNKNOWN_ATOM = Atom(Kind.UNKNOWN, certain=False)


@dataclass(frozen=True)
class Value:
    """The alternatives of a value; each is what one reaching definition gives."""

    atoms: Tuple[Atom, ...]

    @property
    def known(self) -> bool:
        """Every alternative's kind is known."""
        return bool(self.atoms) and all(not a.is_unknown for a in self.atoms)

    @property
    def kind(self) -> Kind:
        """The kind all alternatives share, else UNKNOWN."""
        kinds = {a.kind for a in self.atoms}
        return kinds.pop() if len(kinds) == 1 else Kind.UNKNOWN

    @property
    def certain(self) -> bool:
        """Known, and no alternative rests on a guess."""
        return self.known and all(a.certain for a in self.atoms)

    @property
    def literals(self) -> Optional[Tuple[object, ...]]:
        """Every alternative's literal, when every one has a literal."""
        if not self.known or any(a.literal is None for a in self.atoms):
            return None
        return tuple(dict.fromkeys(a.literal for a in self.atoms))

    @property
    def literal(self) -> Optional[object]:
        found = self.literals
        return found[0] if found is not None and len(found) == 1 else None

    def device_types(self, with_cuda: bool = False) -> Optional[frozenset]:
        """The device types of all alternatives (of those taken on a CUDA host, with_cuda), None if one
        is unknown."""
        atoms = [a for a in self.atoms if not (with_cuda and a.without_cuda)]
        if not atoms or any(a.device_type is None or a.kind not in (Kind.STRING, Kind.DEVICE) for a in atoms):
            return None
        return frozenset(a.device_type for a in atoms)

    @property
    def device_type(self) -> Optional[str]:
        types = self.device_types()
        return next(iter(types)) if types is not None and len(types) == 1 else None

    def indexed(self) -> List[Atom]:
        """The alternatives that certainly carry a device index."""
        return [a for a in self.atoms if a.kind in (Kind.STRING, Kind.DEVICE) and a.index is Index.YES]

    @property
    def no_index(self) -> bool:
        """Every alternative is a device or device string without an index."""
        return self.known and all(a.index is Index.NO for a in self.atoms)

    @property
    def definitions(self) -> List[cst.CSTNode]:
        seen: List[cst.CSTNode] = []
        for atom in self.atoms:
            if atom.defined_at is not None and all(atom.defined_at is not s for s in seen):
                seen.append(atom.defined_at)
        return seen


UNKNOWN = Value((UNKNOWN_ATOM,))


def make_value(*atoms: Atom) -> Value:
    return Value(tuple(atoms))


def join_values(values: Iterable[Value]) -> Value:
    atoms: List[Atom] = []
    for value in values:
        for atom in value.atoms:
            if atom not in atoms:
                atoms.append(atom)
            if len(atoms) > MAX_ALTERNATIVES:
                return UNKNOWN
    return Value(tuple(atoms)) if atoms else UNKNOWN


def map_atoms(value: Value, change) -> Value:
    return Value(tuple(change(a) for a in value.atoms))


def device_string(text: str, **extra) -> Atom:
    """A str literal read as a device: "cuda:0" is device type "cuda" with an index."""
    head, colon, _ = text.partition(":")
    return Atom(Kind.STRING, literal=text, device_type=head, index=Index.YES if colon else Index.NO, **extra)


MAX_ALTERNATIVES = 16
