"""The one trial of a user's energy when an `EnergyModel` is built (`check_energy`): on a fixed probe batch of three
examples (no randomness), everything that would make an estimate wrong or fail later is refused with one ValueError
saying what is wrong, and, for an exception, the user's file and line (the innermost frame in the energy's own
file, else outside torch and raise-eval). `check_data_energies` tries it on data (the test and training examples):
an energy NaN or infinite there, or too large for its dtype to resolve a hundredth of a nat, is refused too."""

from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor


def probe_states(model) -> Tensor:
    """A fixed batch of three chain states (no randomness) on which `check_energy` tries the energy."""
    s, shape = model.support, model.event_shape
    ramp = torch.linspace(0, 1, model.n_visible, dtype=torch.float64).reshape(shape)
    if s.discrete:
        q = s.num_states
        codes = torch.stack([torch.zeros(shape), torch.full(shape, q - 1.0), (ramp * (q - 1)).round()])
        return codes.to(device=model.device, dtype=torch.int64)
    low, high = (s.low, s.high) if s.bounded else (-1.0, 1.0)
    points = torch.stack([low + 0.25 * (high - low) + 0 * ramp, low + (high - low) * ramp, (low + high) / 2 + 0 * ramp])
    return points.to(device=model.device, dtype=model.dtype)


_ONE_EXAMPLE = "on a batch of one example (batch norm in training mode? call energy.eval())"


def check_energy(model) -> None:
    """Try the energy of `model` (an `EnergyModel` being built) on `probe_states` and refuse (ValueError) an exception,
    a result that is not one floating point energy per example, NaN or -inf energies, energies that change between
    two calls (dropout) or with the rest of the batch (batch norm in training mode), and on real support a missing
    or non-finite gradient with respect to the input."""
    states = probe_states(model)
    inputs = model.energy_input(states)
    try:
        with torch.no_grad():
            first = model.energies(inputs)
            second = model.energies(inputs)
    except ValueError as error:
        if "the energy must return" in str(error):
            raise ValueError(f"{str(error)} (a batch shaped {tuple(inputs.shape)}{_squeeze_hint(error)})") from None
        raise ValueError(_raised(model.energy, error)) from error
    except Exception as error:
        raise ValueError(_raised(model.energy, error)) from error
    try:
        with torch.no_grad():
            alone = torch.cat([model.energies(inputs[i : i + 1]) for i in range(inputs.shape[0])])
    except ValueError as error:
        if "the energy must return" in str(error):
            raise ValueError(f"{error} on a batch of one example (an energy must not assume a batch size)") from None
        raise ValueError(_raised(model.energy, error, _ONE_EXAMPLE)) from error
    except Exception as error:
        raise ValueError(_raised(model.energy, error, _ONE_EXAMPLE)) from error
    if not first.is_floating_point():
        raise ValueError(f"the energy must return floating point energies, got {first.dtype}")
    bad = torch.isnan(first) | torch.isneginf(first)
    if bool(bad.any()):
        raise ValueError(
            f"the energy is NaN or -inf (log f = -E must not be NaN or +inf) at {int(bad.sum())} of the 3 probe "
            "examples: check the energy's parameters and operations"
        )
    tol = 1e-4 * float(first.abs().max().clamp(min=1.0))
    if not torch.allclose(first, second, rtol=0, atol=tol):
        raise ValueError("the energy gives different values for the same input (dropout in training mode? call "
                         "energy.eval()); it must be a deterministic function of x")  # fmt: skip
    if not torch.allclose(first, alone, rtol=0, atol=tol):
        raise ValueError("the energy of an example depends on the rest of its batch (batch norm in training mode? "
                         "call energy.eval())")  # fmt: skip
    if model.support.kind == "real":
        try:
            _, grad = model.log_f_and_grad(states)
            model.log_f_and_grad(states)  # a second, the first held: a backward that reuses its memory shows here
        except ValueError:
            raise
        except Exception as error:
            raise ValueError(_raised(model.energy, error, "while differentiating it")) from error
        if not bool(torch.isfinite(grad).all()):
            raise ValueError("the energy's gradient is NaN or infinite at a probe example: HMC needs a finite one")
    else:  # Gibbs with gradients differentiates a discrete energy's one-hot input, where it can
        try:
            _, grad = model.log_f_and_grad(states)
            model.log_f_and_grad(states)
        except Exception:  # not differentiable: the kernels that need a gradient say so when chosen
            pass


DATA_CHUNK = 4096  # examples per forward pass of `check_data_energies` (bounds its memory on large test sets)


def check_data_energies(model, state: Tensor, what: str) -> None:
    """Refuse (ValueError naming `what` and the first bad example) data on which the energy is not finite: the probe
    batch of `check_energy` cannot see an energy that is NaN or infinite only at some inputs, and at a test or
    training example AIS and RAISE would fail on it only after their work (or fit the base to it). One forward pass
    per `DATA_CHUNK` examples, no gradient. state: chain states (N, *event_shape) (`EnergyModel.state_from_data`)."""
    bad_counts, first, largest = {"NaN": 0, "+inf": 0, "-inf": 0}, None, (0.0, 0, None)
    for start in range(0, state.shape[0], DATA_CHUNK):
        try:
            with torch.no_grad():
                energy = model.energies(model.energy_input(state[start : start + DATA_CHUNK]))
        except Exception as error:
            raise ValueError(_raised(model.energy, error, f"on {what}", tried="")) from error
        finite = energy.abs().masked_fill(~torch.isfinite(energy), 0.0)
        if finite.numel() and float(finite.max()) > largest[0]:
            largest = (float(finite.max()), start + int(finite.argmax()), energy.dtype)
        flags = {"NaN": torch.isnan(energy), "+inf": torch.isposinf(energy), "-inf": torch.isneginf(energy)}
        for name, flag in flags.items():
            count = int(flag.sum())
            bad_counts[name] += count
            if count and first is None:
                first = (start + int(flag.nonzero()[0, 0]), name)
    if first is None:
        _check_resolution(*largest, what)
        return
    index, name = first
    counts = ", ".join(f"{n} at {c}" for n, c in bad_counts.items() if c)
    why = {
        "NaN": "a NaN energy has no density: check the energy's operations there (a log or sqrt of a negative "
        "number, 0/0)",
        "+inf": "E = +inf gives the example probability zero, so its log-likelihood is -inf and AIS and RAISE cannot "
        "bound it: remove such examples or keep the energy finite on the support",
        "-inf": "E = -inf gives the example infinite density: the energy is improper there",
    }[name]
    raise ValueError(f"the energy is {name} at example {index} of {what} ({counts} of its {state.shape[0]} "
                     f"examples): {why}")  # fmt: skip


RESOLUTION_NATS = 1e-2  # the coarsest spacing of representable energies at the data that is refused


def _check_resolution(magnitude: float, index: int, dtype: Optional[torch.dtype], what: str) -> None:
    """Refuse energies so large at the data that their dtype cannot resolve differences of RESOLUTION_NATS there
    (a constant offset, harmless in exact arithmetic, makes HMC's and Metropolis's decisions and the AIS weights
    rounding noise: E = -1e8 + |x|^2 / 2 in float32 resolves 8 nats, and a run closed its sandwich off the truth)."""
    if dtype is None or not dtype.is_floating_point:
        return
    spacing = magnitude * torch.finfo(dtype).eps
    if spacing > RESOLUTION_NATS:
        raise ValueError(
            f"the energy is {magnitude:.3g} in magnitude at example {index} of {what}, where {dtype} resolves "
            f"energies only to about {spacing:.2g} nats, so log-likelihoods would be off by as much: subtract a "
            "constant from the energy (it moves log Z, not the model) or run the model in float64"
        )


def _squeeze_hint(error: Exception) -> str:
    return "; squeeze a trailing dimension of 1" if ", 1)" in str(error) else ""


def check_energy_dtype(model) -> None:
    """Refuse (ValueError) an energy module whose first floating parameter or buffer (what `EnergyModel` took its
    dtype from, or checked `dtype=` against) is no longer in the model's dtype, or whose first tensor is no longer on
    its device: the module was changed in place (`energy.double()`, `.to("cuda")`) after the `EnergyModel` was built,
    and the evaluation would feed it states of the old dtype."""
    if not isinstance(model.energy, torch.nn.Module):
        return
    named = [*model.energy.named_parameters(), *model.energy.named_buffers()]
    floats = [(name, t) for name, t in named if t.is_floating_point()]
    changed = [(n, t) for n, t in floats[:1] if t.dtype != model.dtype] or [
        (n, t) for n, t in named[:1] if t.device != model.device
    ]
    for name, t in changed:
        now = f"{str(t.dtype).replace('torch.', '')} on {t.device}"
        built = f"{str(model.dtype).replace('torch.', '')} on {model.device}"
        raise ValueError(
            f"the energy's {name} is {now}, but the EnergyModel was built for {built}: the module changed after "
            f"the model was made; build the EnergyModel again (EnergyModel(energy, ..., dtype={t.dtype})) or move "
            f"the module back"
        )


def _raised(energy, error: BaseException, when: str = "", tried: str = "tried on a probe batch") -> str:
    """'the energy raised Type: message at FILE, line N: SOURCE': the innermost frame in the energy's own file
    (else the innermost frame outside torch and raise-eval)."""
    frames = traceback.extract_tb(error.__traceback__)
    own_file = _source_file(energy)
    if own_file is not None and _library_file(own_file):
        own_file = None  # a torch container (nn.Sequential): the user's file is elsewhere, if anywhere
    chosen = [f for f in frames if own_file is not None and _same_file(f.filename, own_file)]
    if not chosen:
        chosen = [f for f in frames if not _library_file(f.filename)]
    where = ""
    if chosen:
        f = chosen[-1]
        where = f" at {f.filename}, line {f.lineno}" + (f": {f.line.strip()}" if f.line else "")
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""  # one line: its first
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return f"the energy raised {text}{' ' + when if when else ''}{where} ({tried + '; ' if tried else ''}fix it there)"


def _source_file(energy) -> Optional[str]:
    target = type(energy) if isinstance(energy, torch.nn.Module) else energy
    try:
        return inspect.getsourcefile(target)
    except TypeError:
        return None


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def _library_file(name: str) -> bool:
    path = Path(name).resolve()
    roots = [Path(torch.__file__).resolve().parent, Path(__file__).resolve().parent]
    return any(root in path.parents for root in roots)


__all__ = ["check_data_energies", "check_energy", "check_energy_dtype", "probe_states"]
