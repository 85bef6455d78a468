"""The FFNs people write, as a function of NumPy arrays: PyTorch modules, JAX functions and
Flax modules, besides plain NumPy functions (``permute-check --impl``, ``ffncli.testing``).

A framework is recognised by the modules its objects' types come from, so none is imported
unless the object under test comes from it. A class, or a factory (a function with no required
positional parameter), is called with ``--impl-args`` first. Tokens go in as the framework's
tensor on the CPU, with no gradients; outputs come back as NumPy."""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ffncli.base.validate import PARAMETERS, Words
from ffncli.errors import ImplError

Fn = Callable[[np.ndarray], np.ndarray]

RANDOM_HINT = {
    "torch": "call .eval() on a module (or pass dropout=0), or seed its random numbers "
             "(ffncli checks a module in eval mode unless --train-mode)",
    "flax": "make its dropout deterministic, or seed its random numbers",
}
RANDOM_OTHERWISE = "seed its random numbers (a sampler or noise drawn without a seed)"


def _from(obj: object, *prefixes: str) -> bool:
    """Whether ``obj`` (a class, or the class of an instance) comes from one of the packages
    named by ``prefixes`` (``"torch"`` is torch and its submodules)."""
    cls = obj if inspect.isclass(obj) else type(obj)
    return any(base.__module__ == prefix or base.__module__.startswith(prefix + ".")
               for base in cls.__mro__ for prefix in prefixes)


def _is_torch_module(obj: object) -> bool:
    return _from(obj, "torch.nn")


def _is_flax_module(obj: object) -> bool:
    return _from(obj, "flax.linen")


def _is_jax(obj: object) -> bool:
    return _from(obj, "jax", "jaxlib")


def _is_factory(obj: object) -> bool:
    """A class, or a function that can be called without the tokens: no positional parameter
    without a default, and no ``*args`` to take them."""
    if inspect.isclass(obj):
        return True
    if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return False
    params = inspect.signature(obj).parameters.values()
    return not any(p.kind is p.VAR_POSITIONAL or (
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty)
        for p in params)


@dataclass
class Adapted:
    """An object under test as a function of NumPy rows (tokens, d_model), with what was done
    to get it. ``seq`` (set for 3-D input) makes a module see (batch, seq, d_model) tensors;
    ``restore`` puts a module back in the mode it was in, its buffers as they were."""

    call: Callable[[np.ndarray], Any]  # the framework's call, on NumPy as the object takes it,
    # returning what the object returns (a tensor: as_numpy makes it NumPy)
    framework: str  # numpy, torch, jax or flax
    d_model: int | None  # read from the module (its first nn.Linear), when it tells
    no_width: str = "is a function"  # why it cannot tell, for the error asking for --d-model
    mode: str | None = None  # eval or train, for a module
    notes: list[str] = field(default_factory=list)
    restore: Callable[[], None] = lambda: None
    seq: int | None = None

    def fn(self, x: np.ndarray) -> Any:
        """The rows ``x`` through the object: a NumPy function gets them as they are; a module
        gets whole sequences (batch, seq, d_model) when ``seq`` is set, or one shorter
        sequence (one token alone is (1, 1, d_model)), and its output comes back as rows, in
        the framework's type (:func:`as_numpy` makes it NumPy)."""
        if self.framework == "numpy" or self.seq is None:
            return self.call(x)
        rows, seq = x.shape[0], self.seq
        given = x.reshape(rows // seq, seq, -1) if rows % seq == 0 else x.reshape(1, rows, -1)
        y = self.call(given)  # a view: a change in place still shows in x
        shape = getattr(y, "shape", None)
        if shape is not None and hasattr(y, "reshape") and tuple(shape[:-1]) == given.shape[:-1]:
            return y.reshape(rows, -1)
        return y


def adapt(obj: object, label: str, *, dtype: np.dtype, impl_args: dict[str, Any] | None = None,
          seed: int = 0, d_model: int | None = None, train_mode: bool = False,
          words: Words = PARAMETERS) -> Adapted:
    """``obj`` as a function of (rows, d_model) NumPy arrays of ``dtype``. A class or factory
    is called with ``impl_args`` (PyTorch seeded with ``seed``); a module is checked in eval
    mode unless ``train_mode``, and cast to ``dtype`` on a copy. Errors and notes name these
    (and ``fn``, the object) in ``words`` (a command's: ``option --impl``)."""
    fn = words.where("fn")
    if _is_factory(obj):
        obj = _build(obj, label, impl_args or {}, seed, words)
        if inspect.isclass(obj):  # the class itself, where an instance was meant
            raise ImplError(f"{fn}: {label} returned the class {obj.__name__}, not "
                            f"a module or a function: return {obj.__name__}(...)")
    elif impl_args is not None:
        built = "a module already built" if _from(obj, "torch.nn", "flax.linen") else \
            "a function of the tokens"
        raise ImplError(f"{words.where('impl_args')}: {label} is {built}, not a class or a "
                        f"factory; {words.name('impl_args')} is for those")
    if not callable(obj):
        raise ImplError(f"{fn}: {label} gave {type(obj).__name__}, which is not "
                        "callable")
    if _from(obj, "keras", "tensorflow"):
        raise ImplError(f"{fn}: {label} is a Keras layer; ffncli checks NumPy and JAX "
                        "functions and PyTorch and Flax modules: wrap it in a function of a "
                        "NumPy array returning one")
    if _is_torch_module(obj):
        return _torch(obj, label, dtype, train_mode, words)
    if _is_flax_module(obj):
        return _flax(obj, label, dtype, seed, d_model, words)
    if _is_jax(obj):
        return Adapted(_jax_call(obj), "jax", None)
    return Adapted(_numpy_call(obj), "numpy", None)


def _build(factory: Any, label: str, impl_args: dict[str, Any], seed: int, words: Words
           ) -> object:
    """Call a class or factory with ``impl_args``; PyTorch's random numbers are seeded first
    (when the factory comes from a module that uses it), so its weights are the same each run,
    and put back as they were afterwards."""
    import sys

    shown = ", ".join(f"{k}={v!r}" for k, v in impl_args.items())
    torch = sys.modules.get("torch")
    seeded = torch.random.fork_rng(devices=[]) if torch is not None else contextlib.nullcontext()
    try:
        with seeded:  # the caller's own random numbers are put back afterwards
            if torch is not None:
                torch.manual_seed(seed)
            return factory(**impl_args)
    except TypeError as exc:  # a keyword it does not take, or one it needs
        raise ImplError(f"{words.where('impl_args')}: building {label}({shown}) raised "
                        f"TypeError: {exc} (keyword arguments go in {words.name('impl_args')} "
                        f"{'as a JSON object' if words.options else 'as a dict'})") from None
    except ImplError:
        raise
    except Exception as exc:
        raise ImplError(f"{words.where('fn')}: building {label}({shown}) raised "
                        f"{type(exc).__name__}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# What comes back: one array, as NumPy.


def as_numpy(y: object) -> object:
    """A PyTorch tensor or a JAX array as a NumPy array, bfloat16 (which NumPy lacks) as
    float32; anything else as it is (the guard says what is wrong with it)."""
    if _from(y, "torch") and hasattr(y, "detach"):
        tensor: Any = y.detach().cpu()
        return (tensor.float() if came_as(tensor) else tensor).numpy()
    if _is_jax(y) and hasattr(y, "__array__"):
        y = np.asarray(y)
    if isinstance(y, np.ndarray) and came_as(y):  # JAX's, ml_dtypes'
        return y.astype(np.float32)
    return y


def came_as(y: object) -> str | None:
    """``"bfloat16"`` for an array or tensor of bfloat16, which :func:`as_numpy` converts to
    float32 (its tolerances are bfloat16's); else None."""
    return "bfloat16" if str(getattr(y, "dtype", "")).removeprefix("torch.") == "bfloat16" \
        else None


def describe(y: object) -> str:
    """What came back, for an error line: ``tuple of 2 (Tensor, Tensor)``, ``NoneType``."""
    if isinstance(y, (tuple, list)):
        kinds = ", ".join(type(v).__name__ for v in y[:4]) + (", ..." if len(y) > 4 else "")
        return f"a {type(y).__name__} of {len(y)} ({kinds})"
    return type(y).__name__


def _numpy_call(fn: Callable[..., Any]) -> Callable[[np.ndarray], Any]:
    def call(x: np.ndarray) -> Any:
        return fn(x)

    return call


# ---------------------------------------------------------------------------------------------
# PyTorch


_TORCH_DTYPES = {"float16": "float16", "float32": "float32", "float64": "float64"}


def _torch(module: Any, label: str, dtype: np.dtype, train_mode: bool, words: Words
           ) -> Adapted:
    import torch

    notes = []
    modes = [(m, m.training) for m in module.modules()]
    # what a call may change in place (BatchNorm's running statistics in training mode)
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    want = getattr(torch, _TORCH_DTYPES.get(np.dtype(dtype).name, "float32"))
    floats = {p.dtype for p in [*module.parameters(), *module.buffers()] if p.is_floating_point()}
    if floats and floats != {want}:
        have = ", ".join(sorted(str(d).removeprefix("torch.") for d in floats))
        module = _copy(module, label, have, np.dtype(dtype).name, words).to(want)
        notes.append(f"a {have} module, cast to {np.dtype(dtype).name} on a copy")
    if not train_mode:
        module.eval()
    mode = "train" if module.training else "eval"
    train = words.given("train_mode", "True") if not words.options else words.name("train_mode")
    notes.append(f"checked in eval mode ({train} checks it as it is)" if not train_mode
                 else f"checked as it is, in {mode} mode ({train})")

    def call(x: np.ndarray) -> Any:
        with torch.inference_mode():
            return module(torch.from_numpy(x))

    def restore() -> None:
        for m, training in modes:
            m.train(training)
        with torch.no_grad():
            for b, kept in buffers:
                b.copy_(kept)

    width, no_width = _torch_width(module)
    return Adapted(call, "torch", width, no_width, mode, notes, restore)


def _copy(module: Any, label: str, have: str, want: str, words: Words) -> Any:
    """A copy of ``module`` to cast (the caller's stays as it is), or the ImplError saying
    that it cannot be copied: the module did not fail, the copy ffncli makes did."""
    try:
        return copy.deepcopy(module)
    except Exception as exc:
        how = f"({words.given('dtype', have)})" if words.options else f"on {have} tokens"
        instead = (f"check it in {have} {how}" if have in ("float32", "float64")
                   else "make it copyable")  # a library call's dtype is its tokens'
        where = f"{words.where('dtype')} {want}" if words.options else f"{want} tokens"
        raise ImplError(f"{where}: {label} is a {have} module, which ffncli "
                        f"casts to {want} on a copy, and copy.deepcopy cannot copy it "
                        f"({type(exc).__name__}: {exc}); {instead}, or cast it to {want} "
                        "yourself") from None


def _torch_width(module: Any) -> tuple[int | None, str]:
    """d_model from the first ``nn.Linear`` in registration order (a lazy one cannot tell),
    or why there is none."""
    import torch

    for m in module.modules():
        if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin):
            return None, f"is a module whose first layer is lazy ({type(m).__name__})"
        if isinstance(m, torch.nn.Linear):
            return int(m.in_features), ""
    return None, "is a module with no nn.Linear to take d_model from"


# ---------------------------------------------------------------------------------------------
# JAX and Flax


def _jax_call(fn: Callable[..., Any]) -> Callable[[np.ndarray], Any]:
    """Tokens as JAX arrays (in float32 unless JAX's 64-bit mode is on: the outputs' dtype
    then sets the tolerance)."""
    import jax.numpy as jnp

    def call(x: np.ndarray) -> Any:
        return fn(jnp.asarray(x))

    return call


def _flax(module: Any, label: str, dtype: np.dtype, seed: int, d_model: int | None,
          words: Words) -> Adapted:
    import jax

    if d_model is None:
        raise ImplError(f"{words.where('fn')}: {label} is a Flax module, whose layers learn "
                        f"their input width when initialised: give {words.given('d_model', 'N')}")
    sample = np.zeros((1, d_model), dtype)
    try:
        variables = module.init(jax.random.PRNGKey(seed), sample)
    except Exception as exc:
        raise ImplError(f"{words.where('fn')}: initialising {label} on (1, {d_model}) tokens "
                        f"raised {type(exc).__name__}: {exc}") from None
    call = _jax_call(lambda x: module.apply(variables, x))
    return Adapted(call, "flax", d_model, "", None,
                   [f"parameters initialised from {words.given('seed', seed)}"])


@contextlib.contextmanager
def adapted(obj: object, label: str, **kw: Any) -> Iterator[Adapted]:
    """:func:`adapt`, with the module's train/eval mode put back afterwards."""
    done = adapt(obj, label, **kw)
    try:
        yield done
    finally:
        done.restore()
