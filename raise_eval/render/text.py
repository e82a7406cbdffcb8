"""Text renderings of the reports (the tables the command prints). A report is data; these functions draw it.
`names` maps the settings a note, warning or reason names (`{field}`) to the words to print, e.g. the command
line's flags (`raise_eval.cli.options.FLAGS`); None prints the fields' own names."""

from __future__ import annotations

import math
from typing import Any, Optional

from raise_eval.diagnostics import FLAT_SLOPE, TREND_MAX_FACTOR, log_f_allowance
from raise_eval.settings import format_size, render_names
from raise_eval.stats import mean_and_stderr
from raise_eval.units import format_duration


def _n(x: float, width: int, digits: int) -> str:
    """`x` right-aligned in `width` characters with `digits` decimals, and at least one space before it, so that a
    number too large for its column never runs into the one before (-363372.5265 11945.5748, not run together)."""
    text = f"{x:{width}.{digits}f}"
    return text if text.startswith(" ") else " " + text


def evaluation_table(report, names: Optional[dict[str, str]] = None) -> str:
    s = report.settings
    r, a = report.raise_, report.ais
    model = s.get("model", "RBM")
    lines = [
        f"raise-eval evaluate{' ' + s['checkpoint'] if s.get('checkpoint') else ''}: {model}, {s['dtype']} on "
        f"{s['device']}",
        f"data: {_data_words(s, report.num_test)}; "
        f"start: {s['init']}; "
        f"{_schedule_words(s, report.timing)}, K = {s['steps']}; seed {s['seed']}",
        "",
        f"{'':28}{'estimate':>12}{'± s.e.':>10}{'time':>9}",
        "log Z",
    ]
    if a is not None:
        lines.append(
            f"  {'AIS':26}{_n(a.estimate, 12, 4)}{_n(float(a.stderr), 10, 4)}{_secs(report.timing.get('ais_seconds'))}"
            f"   {a.num_chains} chains, ESS {float(a.ess):.0f}, "
            f"±3σ [{_fmt(float(a.lower))}, {_fmt(float(a.upper))}]"
        )
    else:
        lines.append(f"  {'AIS':26}{'(not run)':>12}")
    ti = report.thermodynamic
    if ti is not None:  # beside AIS, never in the sandwich
        lines.append(
            f"  {'TI (not in the verdict)':26}{_n(float(ti.log_normalizer), 12, 4)}{_n(float(ti.stderr), 10, 4)}"
            f"{_secs(report.timing.get('ti_seconds'))}   {ti.num_chains} chains, trapezoid; s.e. over chains only"
        )
    if report.log_z_exact is not None:
        lines.append(f"  {'exact':26}{_n(report.log_z_exact, 12, 4)}{'':10}{_secs(report.timing.get('exact_seconds'))}")
    lf = report.log_f
    estimated = lf is not None and lf.method != "exact"
    if estimated:
        how = {
            "importance": f"{lf.num_samples} importance samples",
            "ais": f"AIS, {getattr(lf, 'steps', 0)} steps x {lf.num_samples} chains",
            "mean-field": "mean-field bound",
        }[lf.method]
        lines.append("log f(v), test average")
        lines.append(
            f"  {'estimate':26}{_n(float(lf.log_unnormalized.mean()), 12, 4)}{'':10}{_secs(lf.seconds)}"
            f"   {how} per vector ({'a lower bound' if lf.method == 'mean-field' else 'a stochastic lower bound'})"
        )
        if report.log_f_check is not None:
            c = report.log_f_check
            lines.append(
                f"  {'check':26}{_n(c.mean_rise, 12, 4)}{_n(c.mean_rise_stderr, 10, 4)}{_secs(c.seconds)}   "
                f"{c.describe()}"
            )
    elif lf is not None and report.settings.get("model", "RBM").split()[0] in ("DBM", "DBN"):
        route = (
            "" if report.exact_values is None or not report.exact_values.route else f" ({report.exact_values.route})"
        )
        lines.append(f"log f(v): exact, by enumeration{route}; used by AIS and the control variate")
    if s.get("likelihood") == "density":  # a Gaussian visible layer: log p(v) is a density, not a probability
        lines.append("average test log-likelihood (nats per vector: a log-density, in the data's units)")
    else:
        lines.append("average test log-likelihood (nats)")
    if report.ais_mean is not None:
        label = "AIS (log f-hat - log Z-hat)" if estimated else "AIS (optimistic)"
        lines.append(f"  {label:26}{_n(report.ais_mean, 12, 4)}{_n(float(a.stderr), 10, 4)}")
        if estimated:
            lines.append(f"  {'':26}an estimate, not a bound: log f-hat errs low, log Z-hat errs low")
    if r is not None and report.control_variate is None:  # stopped between RAISE and its control variate
        lines.append(f"  {'RAISE (conservative)':26}{'(stopped)':>12}")
    elif r is not None:
        cv = report.control_variate
        alpha = f"alpha = {cv.alpha:g}" if cv.alpha_rule == "fixed" else f"alpha = {cv.alpha:.3f} (optimal)"
        start = "" if r.start == "exact posterior" else f" ({r.start})"
        lines += [
            f"  {'RAISE (conservative)':26}{_n(report.raise_mean, 12, 4)}{_n(report.raise_stderr, 10, 4)}"
            f"{_secs(report.timing.get('raise_seconds'))}   {r.log_likelihood.shape[0]} examples x "
            f"{r.num_chains} chains{start}, control variate log f(v), {alpha}",
            f"  {'  without control variate':26}{_n(cv.subset_mean, 12, 4)}{_n(cv.subset_stderr, 10, 4)}"
            f"{'':9}   plain mean over the same {cv.num_subset} examples",
            f"  {'gap (AIS - RAISE)':26}{_n(round(report.gap, 4) + 0.0, 12, 4)}",
        ]
    else:
        lines.append(f"  {'RAISE (conservative)':26}{'(not run)':>12}")
    if report.exact_mean is not None:
        lines.append(f"  {'exact':26}{_n(report.exact_mean, 12, 4)}")
    lines.append(f"total wall time {report.timing['seconds']:.1f} s")
    if report.interrupted and report.error is not None:
        lines.append(f"stopped during {report.interrupted} by an error ({report.error}): the numbers above are what "
                     "finished")  # fmt: skip
    elif report.interrupted:
        lines.append(
            f"interrupted during {report.interrupted}: the numbers above are what finished before Ctrl-C or SIGTERM"
        )
    lines += [f"note: {render_names(n, names)}" for n in report.notes]
    lines += [f"warning [{w.code}]: {render_names(w.message, names)}" for w in report.warnings]
    return "\n".join(lines)


def _data_words(s: dict[str, Any], num_test: int) -> str:
    """'digits (test, 360 vectors)', or for vectors given in Python '360 vectors (test vectors given in Python)'."""
    vectors = _vectors_words(s, num_test)
    if s.get("data"):
        return f"{s['data']} ({s['split']}, {vectors})"
    return f"{vectors} (test vectors given in Python)"


def _schedule_words(s: dict[str, Any], timing: dict[str, Optional[float]]) -> str:
    """'linear schedule', or for the adaptive one its pilot: 'adaptive schedule (pilot: 200 chains, 0.4 s)'."""
    if s["schedule"] != "adaptive":
        return f"{s['schedule']} schedule"
    pilot_time = timing.get("pilot_seconds")
    took = "" if pilot_time is None else f", {pilot_time:.1f} s"
    return f"adaptive schedule (pilot: {s.get('pilot_chains')} chains{took})"


def _vectors_words(s: dict[str, Any], num_test: int) -> str:
    """'10000 vectors', or for a test subset '1000 of 10000 vectors, a fixed random subset (seed 6)'."""
    if not s.get("test_subset"):
        return f"{num_test} vectors"
    return f"{num_test} of {s['test_vectors_total']} vectors, a fixed random subset (seed {s['test_subset_seed']})"


def _secs(x: Optional[float]) -> str:
    return f"{_n(x, 8, 1)}s" if x is not None else f"{'':9}"


def _fmt(x: float) -> str:
    return f"{x:.4f}" if math.isfinite(x) else "-inf"


def certificate_table(cert, names: Optional[dict[str, str]] = None) -> str:
    of = f" of {cert.model}" if cert.model else ""
    lines = [f"certified sandwich{of}, tolerance {nats_text(cert.tolerance)}", ""]
    lines.append(f"{'K':>8}{'AIS':>12}{'± s.e.':>9}{'RAISE':>12}{'± s.e.':>9}{'gap':>9}{'ESS':>7}{'secs':>8}")
    for s in cert.history:
        lines.append(
            f"{s.steps:8d}{_f(s.ais_mean, 12)}{_f(s.ais_stderr, 9)}{_f(s.raise_mean, 12)}{_f(s.raise_stderr, 9)}"
            f"{_f(s.gap, 9)}{_f(s.ais_ess, 7, 0)}{_n(s.seconds, 8, 1)}"
        )
    exact = next((s.exact_mean for s in reversed(cert.history) if s.exact_mean is not None), None)
    if exact is not None:
        lines.append(f"{'exact':>8}{_n(exact, 12, 4)}")
    lines.append("")
    if cert.closed:
        lo, hi = cert.interval
        lines.append(
            f"verdict: CLOSED at K = {cert.history[-1].steps}: the average test log-likelihood lies in "
            f"[{lo:.4f}, {hi:.4f}] ({_interval_ends(cert.history[-1].raise_mean, cert.history[-1].ais_mean)}, ±2 "
            "standard errors"
            + (
                ", and the log f(v) check's rise above"
                if cert.report is not None and log_f_allowance(cert.report) > 0
                else ""
            )
            + ")"
        )
    elif cert.verdict in ("interrupted", "failed"):
        lines.append(f"verdict: {cert.verdict.upper()} (no verdict)")
        lines += [f"  - {render_names(r, names)}" for r in cert.reasons]
    else:
        lines.append(f"verdict: OPEN after K = {cert.history[-1].steps if cert.history else 0}")
        lines += [f"  - {render_names(r, names)}" for r in cert.reasons]
        gaps = [s.gap for s in cert.history if s.gap is not None]
        if len(gaps) >= 2:
            lines.append(f"  gap against K: {', '.join(f'{g:.3f}' for g in gaps)}")
        if cert.needed_steps is not None:
            lines.append(
                f"  if the trend holds, the gap reaches {cert.tolerance:g} nats at about K = {cert.needed_steps:,}"
            )
        elif cert.gap_per_doubling is not None and cert.history:
            rate, last_k = cert.gap_per_doubling, cert.history[-1].steps
            if rate < 2.0**FLAT_SLOPE:
                lines.append(
                    f"  the gap shrinks by {1 - rate:.0%} per doubling of K: at that rate it reaches "
                    f"{cert.tolerance:g} nats only beyond K = {TREND_MAX_FACTOR * last_k:,} ({TREND_MAX_FACTOR:,} "
                    "times the last K), so more K alone will not close it in practice"
                )
            else:
                lines.append(
                    f"  the gap changes by a factor {rate:.2f} per doubling of K: too little for more K to close it"
                )
    lines.append(f"certified run: {cert.seconds:.1f} s")
    lines += [f"note: {render_names(n, names)}" for n in cert.notes]
    return "\n".join(lines)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _interval_ends(raise_mean, ais_mean) -> str:
    """What a closed interval spans: RAISE (conservative) below AIS (optimistic), or the other way round when
    RAISE came out above AIS within the noise."""
    if raise_mean is not None and ais_mean is not None and raise_mean > ais_mean:
        return "AIS to RAISE: RAISE came out above AIS, within the noise"
    return "RAISE to AIS"


def _f(x: Optional[float], width: int, digits: int = 4) -> str:
    if x is None:
        return f"{'—':>{width}}"
    return f"{x:{width}.{digits}f}"


def bdmc_table(report, names: Optional[dict[str, str]] = None) -> str:
    s = report.settings
    lines = [
        f"raise-eval bdmc {_model_source(s)}: {s['model']}, {s['dtype']} on {s['device']}",
        f"data: {s['num_examples']} examples simulated from the model (their latents are exact posterior "
        f"samples); seed {s['seed']}",
        f"kernel: {s['kernel']}; {s['schedule']} schedule; {s['chains']} forward and {s['chains']} reverse "
        "chains per example",
        "",
        "average log p(x) on the simulated examples (nats)",
        f"  {'BDMC':8}{'lower (AIS)':>13}{'upper (rev.)':>14}{'gap ± s.e.':>18}{'Jeffreys bound':>16}{'time':>9}",
    ]
    for k in s.get("steps", sorted(report.sandwich)):
        if k not in report.sandwich:
            lines.append(f"  K={k:<6}{'(not run)':>13}")
            continue
        sm = report.sandwich[k].summary()
        gap = f"{sm['gap']['mean']:.3f} ± {sm['gap']['stderr']:.3f}"
        lines.append(
            f"  K={k:<6}{_n(sm['lower']['mean'], 13, 3)}{_n(sm['upper']['mean'], 14, 3)}{gap:>18}"
            f"{_n(sm['jeffreys_bound']['mean'], 16, 3)}{_n(report.sandwich[k].seconds, 8, 1)}s"
        )
    if report.ground_truth is not None:
        k_max = max(report.sandwich)
        truth, truth_se = mean_and_stderr(report.ground_truth)
        closed = not report.warnings
        label = "truth" if closed else "midpoint"
        lines += [
            "",
            f"  {'estimator':34}{'estimate':>11}{' vs ' + label:>11}{'± s.e.':>9}",  # a space even before 'vs midpoint'
            f"  {'BDMC midpoint, K=' + str(k_max) + (' (truth)' if closed else ' (open)'):34}{_n(truth, 11, 3)}",
        ]
        for name, v in report.baselines.items():
            b = report._baseline_summary(v)
            lines.append(
                f"  {name:34}{_n(b['mean'], 11, 3)}{_n(b['minus_bdmc_midpoint'], 11, 3)}"
                f"{_n(b['minus_bdmc_midpoint_stderr'], 9, 3)}"
            )
        lines.append(
            f"  ('vs {label}': paired difference from the midpoint of the K={k_max} sandwich, example by example; "
            f"the midpoint's own average has a standard error of {truth_se:.2f} over the examples)"
        )
    elif report.baselines:  # no sandwich finished: the estimates alone
        lines += ["", f"  {'estimator':34}{'estimate':>11}{'± s.e.':>9}"]
        for name, v in report.baselines.items():
            m, se = mean_and_stderr(v)
            lines.append(f"  {name:34}{_n(m, 11, 3)}{_n(se, 9, 3)}")
    if report.real:
        lines += [
            "",
            f"the same estimators on real data ({s.get('real_data')}, {s.get('real_examples')} examples):",
            f"  {'estimator':34}{'estimate':>11}{'± s.e.':>9}",
        ]
        for name, v in report.real.items():
            m, se = mean_and_stderr(v)
            lines.append(f"  {name:34}{_n(m, 11, 3)}{_n(se, 9, 3)}")
    if report.aide is not None:
        a = report.aide
        lines += [
            "",
            f"AIDE, encoder vs AIS (K={s.get('aide_steps')}): symmetric KL {a.mean:.3f} ± {a.stderr:.3f} nats "
            f"(Ng={a.num_gold}, Nt={a.num_target}, Mg={a.gold_meta}, Mt={a.target_meta}; "
            f"{a.per_example.numel()} examples, {a.seconds:.0f} s)",
        ]
    lines.append(f"total wall time {report.timing.get('seconds', 0.0):.1f} s")
    if report.interrupted is not None:
        why = "Ctrl-C" if report.error is None else f"an error ({report.error})"
        lines.append(f"stopped during {report.interrupted} by {why}: the numbers above are what finished")
    lines += [f"warning [{w.code}]: {render_names(w.message, names)}" for w in report.warnings]
    return "\n".join(lines)


def _model_source(settings: dict) -> str:
    """The CHECKPOINT or '--model FILE.py:FACTORY' the model came from ('' when neither is recorded)."""
    if settings.get("model_factory"):
        return f"--model {settings['model_factory']}"
    return settings.get("checkpoint") or ""


def cost_estimate_text(estimate, names: Optional[dict[str, str]] = None) -> str:
    """The estimate as printed by `raise-eval evaluate`: the total, then one line per stage."""
    total = estimate.seconds
    head = "estimated cost" if total is None else f"estimated time {format_duration(total)}"
    bound = f" (bound {format_size(estimate.max_memory)})" if estimate.max_memory else ""  # none for an energy's
    lines = [f"{head}, peak memory {format_size(estimate.bytes)}{bound}:"]
    for s in estimate.stages:
        took = "" if s.seconds is None else format_duration(s.seconds)
        share = "" if not total or s.seconds is None else f"{s.seconds / total:.0%}"
        lines.append(f"  {s.label:15}{took:>10}{share:>6}  {format_size(s.bytes):>9}  {s.work}")
    lines += [f"  {render_names(n, names)}" for n in estimate.notes]
    if estimate.timing:
        lines.append(f"  ({estimate.timing})")
    return "\n".join(lines)


def nats_text(x: float) -> str:
    """A number of nats in words: '1 nat', '0.5 nats'."""
    shown = f"{x:g}"
    return f"{shown} nat" if shown == "1" else f"{shown} nats"


def trajectory_thinning(settings: dict) -> str:
    """Which of the saved checkpoints a trajectory run took, as a template naming its settings ("2 of the 3 saved,
    {from_step} 100"; `render_names` writes them), or "" when it took them all."""
    if settings.get("checkpoints_saved") is None:
        return ""
    how = [f", {{{key}}} {settings[key]}" for key in ("from_step", "min_step_gap") if settings.get(key) is not None]
    return f"{settings['num_checkpoints']} of the {settings['checkpoints_saved']} saved" + "".join(how)


def trajectory_table(report, names: Optional[dict[str, str]] = None) -> str:
    """The table of `raise-eval trajectory`: log Z (AIS, BAR, exact) and the test log-likelihood (AIS, RAISE, exact)
    at every checkpoint, BAR's flagged links, and the verdict on the last checkpoint."""
    s = report.settings
    sizes = "-".join(str(n) for n in s["layer_sizes"])
    where = f" ({s['folder']})" if s.get("folder") else ""
    split = s.get("split")
    data = (s["data"] + (f" {split}" if split not in (None, "file") else "")) if s.get("data") else "test vectors"
    start = s["init"] if s["start"] == "prepended" else "the first checkpoint (no weights)"
    first = f", {s['start_steps']} on the first" if s.get("start_steps") else ""
    links = f"K = {s['steps']} sub-steps per link{first}"
    if s.get("links") == "adaptive":  # K and the first link's steps were not used: the pilot chose every link's
        links = f"adaptive links (target CESS {s['target_cess']:g})"
    thinned = trajectory_thinning(s)
    thinned = f" ({render_names(thinned, names)})" if thinned else ""
    units = f" of {', '.join(s['units'])} units" if s.get("units") else ""
    machine = f"{sizes} {s['family']}{units}"
    if s["family"] == "fully-visible":  # one layer of sites: e.g. 'fully visible model of 53 categorical sites'
        machine = f"fully visible model of {sizes} {s['units'][0]} sites"
    chains = f"{s['ais_chains']:,} AIS chains"
    if s.get("resample_ess"):
        resampled = report.final.resamplings if report.final is not None else 0
        chains = (
            f"{s['ais_chains']:,} chains in {s['replicates']} SMC replicates (resampled below ESS "
            f"{s['resample_ess']:g} of a replicate's chains, {resampled:,} times; the AIS columns are SMC's, log Z's "
            "s.e. the replicates' spread's)"
        )
    lines = [
        f"raise-eval trajectory{where}: {_count(s['num_checkpoints'], 'checkpoint')} "
        f"of a {machine}{thinned}, {s['dtype']} on {s['device']}",
        f"data: {data} ({report.num_test:,} vectors); start: {start}; {links} "
        f"({s['num_steps']:,} steps), {chains}; RAISE {s['raise_examples']} x "
        f"{s['raise_chains']} at {_count(sum(c.raise_mean is not None for c in report.checkpoints), 'checkpoint')}; "
        f"seed {s['seed']}",
        "",
        f"{'':10}{'log Z':-^38}  {'test log-likelihood':-^44}",
        f"{'step':>10}{'AIS':>11}{'± s.e.':>8}{'BAR':>11}{'± s.e.':>8}{'exact':>11}"
        f"{'AIS':>11}{'RAISE':>11}{'± s.e.':>8}{'exact':>11}{'ESS':>7}",
    ]
    for c in report.checkpoints:
        lines.append(
            f"{c.step:>10}{_f(c.log_z, 11)}{_f(c.log_z_stderr, 8)}{_f(c.log_z_bar, 11)}{_f(c.log_z_bar_stderr, 8)}"
            f"{_f(c.log_z_exact, 11)}{_f(c.ais_mean, 11)}{_f(c.raise_mean, 11)}{_f(c.raise_stderr, 8)}"
            f"{_f(c.exact_mean, 11)}{_f(c.ess, 7, 0)}"
        )
    methods = {c.log_f_method for c in report.checkpoints}
    if methods - {"exact"}:
        lines.append("log f(v): estimated by importance sampling where it is not enumerated (a stochastic lower bound)")
    lines.append("")
    flagged = report.coarse_links
    if flagged:
        lines.append(
            f"BAR's health check flags {len(flagged)} of {len(report.links)} links (the path is too coarse there):"
        )
        for link in flagged:
            lines.append(f"  {link.start} -> {link.end}: " + "; ".join(link.problems))
    elif report.links:
        worst = min(report.links, key=lambda link: link.overlap)
        lines.append(
            f"BAR's links: all {len(report.links)} healthy (smallest overlap {worst.overlap:.3f}, {worst.start} -> "
            f"{worst.end})"
        )
    final = report.final
    if report.interrupted is not None:
        kept = "the table holds the checkpoints whose estimates finished" if final else "no estimate finished"
        lines.append(f"interrupted during {report.interrupted}: {kept}; no verdict")
    elif report.closed:
        lo, hi = report.interval
        lines.append(
            f"verdict on the last checkpoint (step {final.step}, tolerance {nats_text(s['tolerance'])}): CLOSED: the "
            f"average test log-likelihood lies in [{lo:.4f}, {hi:.4f}] "
            f"({_interval_ends(final.raise_mean, final.ais_mean)}, ±2 standard errors)"
        )
    else:
        lines.append(f"verdict on the last checkpoint (step {final.step}, tolerance {nats_text(s['tolerance'])}): OPEN")
        lines += [f"  - {render_names(r, names)}" for r in report.reasons]
    for w in report.warnings:
        lines.append(f"warning [{w.code}]: {render_names(w.message, names)}")
    t = report.timing
    parts = [("AIS pass", "ais_seconds"), ("BAR", "bar_seconds"), ("log f(v) and exact values",
             "log_f_and_exact_seconds"), ("RAISE", "raise_seconds")]  # fmt: skip
    finished = ", ".join(f"{what} {t[key]:.1f} s" for what, key in parts if key in t)
    lines.append(f"time: {t['seconds']:.1f} s" + (f" ({finished})" if finished else ""))
    lines += [f"note: {render_names(n, names)}" for n in report.notes]
    return "\n".join(lines)
