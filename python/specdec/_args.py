# SPDX-License-Identifier: Apache-2.0
"""The Python side's conversion of arguments, in one place (the C++ side's is check_array in
python/src/common.hpp).

Arrays the C++ side reads or writes in place (logits, probabilities, a padded batch, every output) go
to it as they are, and it checks them: dtype, dimensions, strides, device, writability, each error
naming the argument. What is converted here are the small parameters a caller may give as Python
numbers or lists: integers (token ids, counts, offsets, per-row ``top_k``, indices), reals (``top_p``,
temperatures) and sizes. Every conversion checks before it copies or allocates, and raises
``TypeError`` (not a number of the kind expected, e.g. a float where an integer is) or ``ValueError``
(a value out of range, a shape) whose message starts with the argument's name. Integers are never
wrapped (``np.asarray(2**32 + 5).astype(np.int32)`` is 5) nor truncated (2.7 is not 2), and an index
is never negative (specdec does not use Python's negative indexing)."""

from __future__ import annotations

import sys

import numpy as np

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
UINT64_END = 2**64
#: specdec::max_elements (include/specdec/core/checked.hpp): the largest buffer specdec allocates.
MAX_ELEMENTS = 2**40

_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 2**8 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), INT32_MAX),
    "int64": (-(2**63), INT64_MAX),
    "uint64": (0, UINT64_END - 1),
}


def is_torch(x) -> bool:
    # A torch tensor can only exist once torch is imported: no import here (specdec never needs torch).
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _kind(value) -> str:
    """What `value` is, for a message: a dtype for arrays, the type's name otherwise."""
    dtype = getattr(value, "dtype", None)
    if dtype is not None and hasattr(value, "shape"):
        return f"dtype {str(dtype).replace('torch.', '')}"
    return type(value).__name__


def integer(name: str, value, lo: int | None = None, hi: int | None = None, why: str = "") -> int:
    """`value` as a Python int in [lo, hi] (by default int64's range: what the C++ side takes): an int or
    numpy integer (or a 0-d integer array); a float, a bool, None or anything else is a TypeError naming
    `name`, a value out of range a ValueError."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        v = int(value)
    elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        v = int(value)
    else:
        raise TypeError(f"{name}: expected an integer; got {_kind(value)}"
                        + (f" {value!r}" if isinstance(value, (float, np.floating)) else ""))
    lo = -(2**63) if lo is None else lo
    hi = INT64_MAX if hi is None else hi
    if v < lo or v > hi:
        raise ValueError(f"{name}: expected {lo} <= {name} <= {hi}{why}; got {v}")
    return v


def flag(name: str, value) -> bool:
    """A yes / no argument: a bool (or numpy bool, or the integers 0 and 1); anything else a TypeError
    naming `name` (an array's truth is ambiguous; a string's is not what was meant)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name}: expected True or False; got {_kind(value)}")


def ndim(x) -> int:
    """The dimensions of an array or a (nested) sequence; 1 for what numpy cannot read (a ragged list),
    which the conversion then refuses by name."""
    n = getattr(x, "ndim", None)
    if n is None:
        try:
            n = np.ndim(x)
        except (ValueError, TypeError):
            n = 1
    return int(n)


def size(name: str, value, hi: int = INT32_MAX, why: str = "") -> int:
    """A size or count from the caller (rows, k, a prefix length): an integer in [0, hi], checked before
    anything of that size is allocated."""
    return integer(name, value, 0, hi, why)


def elements(name: str, shape) -> tuple:
    """`shape` of a new array, refused (naming `name`, the argument that sizes it) when its element count
    exceeds specdec::max_elements: checked before the allocation, which would otherwise raise
    MemoryError or, lazily committed, fail when written."""
    count = 1
    for extent in shape:
        count *= int(extent)
    if count > MAX_ELEMENTS:
        raise ValueError(f"{name}: the output would have shape {tuple(int(e) for e in shape)}, more than 2^40 elements "
                         "(specdec's largest buffer)")
    return tuple(int(e) for e in shape)


def real(name: str, value, lo: float | None = None, hi: float | None = None) -> float:
    """`value` as a Python float: an int, float or numpy number (or a 0-d array of one); anything else a
    TypeError naming `name`. NaN and the bounds [lo, hi] (when given) are ValueErrors."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected a real number; got bool")
    if isinstance(value, (int, float, np.integer, np.floating)):
        v = float(value)
    elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        v = float(value)
    else:
        raise TypeError(f"{name}: expected a real number; got {_kind(value)}")
    if (lo is not None or hi is not None) and v != v:
        raise ValueError(f"{name}: expected a number; got nan")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise ValueError(f"{name}: expected a value in [{lo}, {hi}]; got {v}")
    return v


def shape(name: str, x, ndim: int | None = None) -> tuple:
    """The shape of array argument `x` (numpy, torch or another array), checked to have `ndim`
    dimensions; not an array is a TypeError naming `name` (read before anything is allocated)."""
    s = getattr(x, "shape", None)
    if s is None or not hasattr(x, "dtype"):
        raise TypeError(f"{name}: expected an array (numpy, torch or another DLPack or buffer-protocol producer); got "
                        f"{type(x).__name__}")
    s = tuple(int(e) for e in s)
    if ndim is not None and len(s) != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions; got shape {s}")
    return s


def _host(name: str, value):
    """`value` as a numpy array (a CPU torch tensor viewed; a CUDA one refused: these are host values)."""
    if is_torch(value):
        if value.device.type != "cpu":
            raise ValueError(f"{name}: expected host values (a number, a list, a numpy array or a CPU tensor); got a tensor on "
                             f"{value.device}")
        value = value.detach().numpy()
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError):  # a ragged list, an object numpy cannot hold
        raise TypeError(f"{name}: expected numbers (a number, a sequence or an array); got {type(value).__name__}") from None


def integers(name: str, value, dtype: str = "int32", *, ndim: int = 1, scalar: bool = False, lo: int | None = None,
             hi: int | None = None, what: str = "integers", why: str = "") -> np.ndarray:
    """`value` (an int, a sequence, a numpy array, a CPU torch tensor) as a C-contiguous numpy array of the
    integer `dtype` with `ndim` dimensions (`scalar`: a single int is one entry), every entry in [lo, hi]
    and in `dtype`'s range: no copy when it already is one and needs no bounds. A float or bool entry is a
    TypeError, an entry out of range a ValueError, each naming `name`; nothing wraps."""
    if (isinstance(value, np.ndarray) and value.dtype == dtype and value.ndim == ndim and value.flags.c_contiguous
            and lo is None and hi is None):
        return value
    if scalar and ndim == 1 and type(value) is int:  # the common `top_k=50`: ~0.4 us where the general path took ~4
        low, high = _BOUNDS[dtype]
        if max(low, value if lo is None else lo) <= value <= min(high, value if hi is None else hi):
            return np.array((value,), dtype=dtype)
    a = _host(name, value)
    if a.dtype.kind in "fO" and a.size and not isinstance(value, np.ndarray) and not is_torch(value):
        # A sequence numpy made float or object: [-1, 2**63] is float64 to numpy, and 2**63 + 1 would read
        # as 2**63; entry by entry as Python objects instead, each checked to be an integer below.
        try:
            a = np.array(value, dtype=object)
        except (ValueError, TypeError):
            raise TypeError(f"{name}: expected {what} (integers); got {type(value).__name__}") from None
    if a.dtype.kind == "O":  # Python ints beyond int64 (or other objects)
        flat = a.ravel().tolist()
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in flat):
            raise TypeError(f"{name}: expected {what} (integers); got {', '.join(sorted({type(v).__name__ for v in flat}))}")
    elif a.size == 0 and a.dtype.kind in "iufb":
        a = a.astype(dtype)  # [] is float64 to numpy: no entries, nothing to misread
    elif a.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected {what} (integers); got {_kind(a)}")
    if a.ndim == 0 and scalar:
        a = a.reshape(1)
    if a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension{'s' if ndim != 1 else ''}"
                         + (" (or a single integer)" if scalar else "") + f"; got shape {a.shape}")
    low, high = _BOUNDS[dtype]
    if a.size:
        listed = a.ravel().tolist() if a.dtype.kind == "O" else None
        least = min(listed) if listed is not None else int(a.min())
        most = max(listed) if listed is not None else int(a.max())
        if least < low or most > high:
            raise ValueError(f"{name}: expected {what} that fit {dtype}; got {least if least < low else most}")
        if (lo is not None and least < lo) or (hi is not None and most > hi):
            bad = least if lo is not None and least < lo else most
            where = listed.index(bad) if listed is not None else int(np.flatnonzero(a.ravel() == bad)[0])
            at = ", ".join(str(int(i)) for i in np.unravel_index(where, a.shape))
            low_text, high_text = "-inf" if lo is None else lo, "inf" if hi is None else hi
            raise ValueError(f"{name}: expected {what} in [{low_text}, {high_text}]{why}; got {name}[{at}] = {bad}")
        if listed is not None:
            a = np.array(listed, dtype=dtype).reshape(a.shape)
    return np.ascontiguousarray(a, dtype=dtype)


def reals(name: str, value, dtype: str = "float32", *, ndim: int | None = 1, scalar: bool = False) -> np.ndarray:
    """`value` (a number, a sequence, a numpy array, a CPU torch tensor) as a C-contiguous numpy array of
    the float `dtype` with `ndim` dimensions (None: any; `scalar`: a single number is one entry); integers
    convert, a bool, complex or other entry is a TypeError naming `name`. No copy when it already is one."""
    if (isinstance(value, np.ndarray) and value.dtype == dtype and (ndim is None or value.ndim == ndim)
            and value.flags.c_contiguous):
        return value
    if scalar and ndim == 1 and type(value) is float:  # the common `top_p=0.9`, without numpy's conversions
        return np.array((value,), dtype=dtype)
    a = _host(name, value)
    if a.dtype.kind not in "iuf" and not (a.size == 0 and a.dtype.kind in "bO"):
        raise TypeError(f"{name}: expected real numbers; got {_kind(a)}")
    if a.ndim == 0 and scalar:
        a = a.reshape(1)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension{'s' if ndim != 1 else ''}"
                         + (" (or a single number)" if scalar else "") + f"; got shape {a.shape}")
    return np.ascontiguousarray(a, dtype=dtype)


def flags(name: str, value) -> np.ndarray:
    """Per-request booleans (``is_greedy``) as a C-contiguous uint8 numpy array of 0 / 1: bools, or
    integers that are 0 or 1 (256 is not read as 0)."""
    a = _host(name, value)
    if a.dtype.kind == "b":
        return np.ascontiguousarray(a.reshape(1) if a.ndim == 0 else a, dtype=np.uint8)
    return integers(name, value, "uint8", scalar=True, lo=0, hi=1, what="flags (bools, or 0 and 1)")


def choice(name: str, value, options) -> str:
    """`value`, one of the strings `options`; anything else a ValueError (a string) or TypeError naming
    `name` and the options."""
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {', '.join(repr(o) for o in options)}; got {type(value).__name__}")
    if value not in options:
        raise ValueError(f"{name}: expected one of {', '.join(repr(o) for o in options)}; got {value!r}")
    return value


def device_integers(name: str, value, dtype: str, like, *, ndim: int = 1, scalar: bool = False, lo: int | None = None,
                    hi: int | None = None, what: str = "integers", why: str = ""):
    """`integers` for a call on `like`'s CUDA device: a torch tensor of `dtype` there. A tensor already
    there and of that dtype is taken as it is (contiguous) when no bounds are asked; any other tensor's
    range is checked before its conversion (one synchronisation), so that `.to(torch.int32)` never wraps."""
    torch = sys.modules["torch"]
    target = getattr(torch, dtype)
    if not is_torch(value):
        a = integers(name, value, dtype, ndim=ndim, scalar=scalar, lo=lo, hi=hi, what=what, why=why)
        return torch.from_numpy(a).to(like.device)
    t = value.detach()
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{name}: expected {what} (integers); got {_kind(t)}")
    if t.dim() == 0 and scalar:
        t = t.reshape(1)
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension{'s' if ndim != 1 else ''}; got shape {tuple(t.shape)}")
    low, high = _BOUNDS[dtype]
    if lo is not None:
        low = max(low, lo)
    if hi is not None:
        high = min(high, hi)
    if t.numel() and (t.dtype != target or lo is not None or hi is not None):
        least, most = int(t.min().item()), int(t.max().item())
        if least < low or most > high:
            bad = least if least < low else most
            raise ValueError(f"{name}: expected {what} in [{low}, {high}]{why}; got {bad}")
    return t.to(device=like.device, dtype=target).contiguous()


def device_reals(name: str, value, dtype: str, like, *, ndim: int = 1, scalar: bool = False):
    """`reals` for a call on `like`'s CUDA device: a torch tensor of `dtype` there."""
    torch = sys.modules["torch"]
    if not is_torch(value):
        return torch.from_numpy(reals(name, value, dtype, ndim=ndim, scalar=scalar)).to(like.device)
    t = value.detach()
    if not (t.dtype.is_floating_point or (not t.dtype.is_complex and t.dtype != torch.bool)):
        raise TypeError(f"{name}: expected real numbers; got {_kind(t)}")
    if t.dim() == 0 and scalar:
        t = t.reshape(1)
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimension{'s' if ndim != 1 else ''}; got shape {tuple(t.shape)}")
    return t.to(device=like.device, dtype=getattr(torch, dtype)).contiguous()


def seed_offset(seed, offset, generator) -> tuple[int, int]:
    """The (seed, offset) of a sampling call: `seed` and `offset` as given (integers in [0, 2^64), the
    uint64 a Philox stream takes), one integer drawn from a torch.Generator, or from numpy's global
    generator."""
    o = 0 if offset is None else integer("offset", offset, 0, UINT64_END - 1)
    if seed is not None:
        return integer("seed", seed, 0, UINT64_END - 1), o
    if generator is not None:
        torch = sys.modules.get("torch")  # a torch.Generator exists only once torch is imported
        if torch is None or not isinstance(generator, torch.Generator):
            raise TypeError(f"generator: expected a torch.Generator; got {type(generator).__name__}")
        return int(torch.randint(0, 2**62, (1,), generator=generator).item()), o
    return int(np.random.randint(0, 2**62, dtype=np.int64)), o
