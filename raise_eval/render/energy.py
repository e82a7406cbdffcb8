"""The table of an energy model's evaluation (`evaluation.energy.EnergyReport`, data): a header saying what was
evaluated and how (data, K, chains, seed, kernel), the sandwich, the verdict, the warnings and the time."""

from __future__ import annotations

from typing import Optional

from raise_eval.render.text import _interval_ends, nats_text
from raise_eval.settings import render_names


def energy_table(report, names: Optional[dict[str, str]] = None) -> str:
    """`report`'s table; settings in messages written as `names` gives them (the command's flags)."""
    s, acc = report.settings, report.acceptance
    n = len(report.lower)
    vectors = "vector" if n == 1 else "vectors"
    rows = [
        ("model", report.model),
        ("data", _data_words(report.data)),
        ("annealing", f"K = {s['steps']:,} (linear), {s['ais_chains']:,} AIS chains, {s['raise_chains']:,} RAISE "
                      f"chains per test vector, seed {s['seed']}"),
        ("kernel", f"{_kernel_words(report.kernel, s)} (acceptance: AIS {acc['AIS']:.2f}, RAISE {acc['RAISE']:.2f})"),
        ("log Z (AIS)", f"{report.log_z:.3f} +- {_se(report.log_z_stderr)} (ESS {report.ais_ess:.1f})"),
        ("log p(v), AIS (upper)", f"{report.upper_mean:.3f} +- {_se(report.upper_stderr)}"),
        ("log p(v), RAISE (lower)",
         f"{report.lower_mean:.3f} +- {_se(report.lower_stderr)} (control variate log f(v))"),
        ("  over test sets", f"+- {_se(report.lower_plain_stderr)} (RAISE's standard error over the {n} test "
                             f"{vectors}, their own spread included: another test set's average could lie this far; "
                             "the +- above are the estimators' noise on these)"),
        ("gap", f"{report.gap:.3f} +- {_se(report.gap_stderr)}"),
    ]  # fmt: skip
    if report.exact_log_z is not None:  # an enumerable discrete energy: the truth beside the estimates
        rows += [("log Z (exact)", f"{report.exact_log_z:.3f} (enumerated)"),
                 ("log p(v), exact", f"{report.exact_mean:.3f}")]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    tolerance = f"tolerance {nats_text(s['tolerance'])}"
    if report.verdict == "closed":
        lo, hi = report.interval
        ends = _interval_ends(report.lower_mean, report.upper_mean)
        lines.append(f"verdict ({tolerance}): CLOSED: the average log-likelihood of these {n} test {vectors} lies in "
                     f"[{lo:.4f}, {hi:.4f}] ({ends}, ±2 combined standard errors)")  # fmt: skip
    else:
        lines.append(f"verdict ({tolerance}): OPEN")
        lines += [f"  - {render_names(r, names)}" for r in report.reasons]
    lines += [f"warning ({w.code}): {w.render(names).message}" for w in report.warnings]
    lines += [f"note: {render_names(n, names)}" for n in getattr(report, "notes", [])]
    parts = ", ".join(f"{k} {v:.1f} s" for k, v in report.seconds.items())
    lines.append(f"time: {report.total_seconds:.1f} s ({parts})")
    return "\n".join(lines)


def _se(value: float) -> str:
    """A standard error as the table writes it: three decimals, or two significant digits where those would show
    0.000 (a standard error of 0.000 tells the reader nothing)."""
    return f"{value:.1e}" if 0 < value < 0.0005 else f"{value:.3f}"


def _data_words(data: dict) -> str:
    test = data.get("test")
    words = f"{test:,} test vector{'' if test == 1 else 's'}" if test is not None else "test vectors"
    if data.get("test_file"):
        words += f" ({data['test_file']})"
    base = data.get("base")
    if base == "fitted":
        words += f"; base fitted to {data['train']:,} training vectors"
        words += f" ({data['train_file']})" if data.get("train_file") else ""
    elif base == "default":
        kind = data.get("default_base", "N(0, 1) per coordinate, a broad Gaussian on a box, or uniform sites")
        words += f"; the default base ({kind})"
    elif base:
        words += f"; base {base}"
    return words


def energy_partial_table(partial) -> str:
    """An interrupted evaluation's table (`evaluation.energy.EnergyPartial`): what it evaluated and what finished."""
    s = partial.settings
    rows = [
        ("model", partial.model),
        ("data", _data_words(partial.data)),
        ("annealing", f"K = {s['steps']:,} (linear), {s['ais_chains']:,} AIS chains, {s['raise_chains']:,} RAISE "
                      f"chains per test vector, seed {s['seed']}"),
        ("kernel", _kernel_words(partial.kernel, s)),
    ]  # fmt: skip
    if partial.log_z is not None:
        rows.append(("log Z (AIS)", f"{partial.log_z:.3f} +- {_se(partial.log_z_stderr)} (ESS {partial.ais_ess:.1f})"))
    width = len("log p(v), RAISE (lower)")  # the full table's column
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    finished = ", ".join(f"{stage} {t:.1f} s" for stage, t in partial.seconds.items())
    lines.append(f"interrupted during {partial.interrupted}: no RAISE estimate and no verdict"
                 + (f" (finished: {finished})" if finished else ""))  # fmt: skip
    return "\n".join(lines)


def _kernel_words(kernel: str, s: dict) -> str:
    if kernel == "hmc":
        return f"hmc, L = {s['num_leapfrog']}, step sizes from a pilot of up to {s['pilot_steps']} temperatures"
    if kernel == "mala":
        return f"mala, step sizes from a pilot of up to {s['pilot_steps']} temperatures"
    return kernel
