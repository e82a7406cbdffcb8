"""Plots of the reports (matplotlib, the "plot" extra): a report is data; these functions draw it into a file.
Each figure is drawn on its own Agg canvas (no pyplot state, no window) and saved marked as raise-eval's, so that a
later run may replace it, through `raise_eval.io.outputs.save_figure` (whole or not at all)."""

from __future__ import annotations

import math

from raise_eval.diagnostics import GAP_NATS
from raise_eval.io.writing import save_figure
from raise_eval.render.text import nats_text, trajectory_thinning
from raise_eval.settings import render_names


def _figure(size):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig


def plot_certificate(cert, path: str) -> None:
    """AIS and RAISE (± one standard error) against K, log-scaled K, with the exact value when known and the
    verdict in the title (needs matplotlib: pip install .[plot])."""
    ks = [s.steps for s in cert.history]
    fig = _figure((6.4, 4.2))
    ax = fig.subplots()
    for name, means, errs, colour in (
        (cert.ais_label, [s.ais_mean for s in cert.history], [s.ais_stderr for s in cert.history], "tab:red"),
        ("RAISE", [s.raise_mean for s in cert.history], [s.raise_stderr for s in cert.history], "tab:blue"),
    ):
        pts = [(k, m, e or 0.0) for k, m, e in zip(ks, means, errs) if m is not None and math.isfinite(m)]
        if pts:
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                yerr=[p[2] for p in pts],
                marker="o",
                capsize=3,
                label=name,
                color=colour,
            )
    exact = next((s.exact_mean for s in reversed(cert.history) if s.exact_mean is not None), None)
    if exact is not None:
        ax.axhline(exact, color="black", linestyle="--", linewidth=1, label="exact")
    if cert.closed:
        ax.axhspan(*cert.interval, color="tab:green", alpha=0.15, label="certified interval")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [f"{k:,}" for k in ks])  # the Ks tried, not powers of two
    ax.minorticks_off()
    ax.set_xlabel("K (intermediate distributions)")
    ax.set_ylabel("average test log-likelihood (nats)")
    title = f"sandwich {cert.verdict} (tolerance {nats_text(cert.tolerance)})"
    ax.set_title(f"{cert.model}: {title}" if cert.model else title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)  # whole or not at all; marked: a later run may replace it


def plot_bdmc(report, path: str) -> None:
    """Bounds against K with the baselines as horizontal lines (needs matplotlib: pip install .[plot])."""
    ks = sorted(report.sandwich)
    lower = [report.sandwich[k].summary()["lower"]["mean"] for k in ks]
    upper = [report.sandwich[k].summary()["upper"]["mean"] for k in ks]
    fig = _figure((6, 4))
    ax = fig.subplots()
    ax.plot(ks, lower, "o-", label="forward AIS (lower bound)")
    ax.plot(ks, upper, "s-", label="reverse AIS (upper bound)")
    for i, (name, v) in enumerate(report.baselines.items()):
        ax.axhline(float(v.double().mean()), linestyle="--", color=f"C{i + 2}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("intermediate distributions K")
    ax.set_ylabel("average log p(x) (nats)")
    ax.set_title(f"BDMC on {report.settings['num_examples']} simulated examples")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)  # whole or not at all; marked: a later run may replace it


def plot_monitor(history, path: str, title: str) -> None:
    """AIS and RAISE (± s.e.) of a training monitor's records against the epoch, the exact value where known, and
    their gap below (`raise_eval.integrations.hooks.LikelihoodMonitor`); a PNG at `path`."""
    from matplotlib.ticker import MaxNLocator

    h = history
    epochs = [r.epoch for r in h]
    fig = _figure((7, 6))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1.2]})
    for name, mean, se, style, color in (
        ("AIS (optimistic)", [r.ais for r in h], [r.ais_se for r in h], "o-", "C0"),
        ("RAISE (conservative)", [r.raise_ for r in h], [r.raise_se for r in h], "s-", "C1"),
    ):
        top.plot(epochs, mean, style, color=color, label=f"{name} ± s.e.", markersize=4)
        lo = [m - s for m, s in zip(mean, se)]
        hi = [m + s for m, s in zip(mean, se)]
        top.fill_between(epochs, lo, hi, color=color, alpha=0.25, linewidth=0)
    known = [r for r in h if r.exact is not None]
    if known:
        top.plot([r.epoch for r in known], [r.exact for r in known], "x--", color="black", label="exact")
    top.set_ylabel("average test log-likelihood (nats)")
    top.set_title(title, fontsize=9)
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    bottom.plot(epochs, [r.gap for r in h], "o-", color="C2", markersize=4, label="gap (AIS - RAISE)")
    bottom.axhline(0.0, color="grey", linewidth=0.8)
    if max(r.gap for r in h) >= GAP_NATS / 2:
        # Only when it is near: the threshold line would otherwise flatten small gaps into the zero line.
        bottom.axhline(GAP_NATS, color="C3", linestyle=":", label=f"{GAP_NATS:g} nat: large-gap warning")
    bottom.annotate(f"{h[-1].gap:.3f}", (epochs[-1], h[-1].gap), textcoords="offset points", xytext=(-4, 6), ha="right")
    bottom.set_ylabel("gap (nats)")
    bottom.set_xlabel("epoch (from 0)")
    bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # whole or not at all


def plot_trajectory(report, path: str) -> None:
    """Three panels against the training step (`raise_eval.trajectory.TrajectoryReport`): log Z (AIS, BAR, exact);
    the average test log-likelihood (AIS, RAISE, exact); and the same numbers minus the exact log-likelihood (minus
    AIS's where it is not known), with their standard errors, where the sandwich and the estimators' errors show.
    BAR's flagged links are shaded."""
    cs = report.checkpoints
    steps = [c.step for c in cs]
    fig = _figure((7.5, 8.6))
    top, middle, bottom = fig.subplots(3, 1, sharex=True, gridspec_kw={"height_ratios": [1, 1, 1.3]})
    top.plot(steps, [c.log_z for c in cs], "o-", color="tab:red", markersize=3, label="AIS")
    top.plot(steps, [c.log_z_bar for c in cs], "s--", color="tab:purple", markersize=3, label="BAR")
    known = [c for c in cs if c.log_z_exact is not None]
    if known:
        top.plot([c.step for c in known], [c.log_z_exact for c in known], "x", color="black", label="exact")
    top.set_ylabel("log Z")
    top.legend(fontsize=8)
    middle.plot(steps, [c.ais_mean for c in cs], "o-", color="tab:red", markersize=3, label="AIS (optimistic)")
    raised = [c for c in cs if c.raise_mean is not None]
    if raised:
        middle.plot([c.step for c in raised], [c.raise_mean for c in raised], "s", color="tab:blue", markersize=5,
                    label="RAISE (conservative)")  # fmt: skip
    known = [c for c in cs if c.exact_mean is not None]
    if known:
        middle.plot([c.step for c in known], [c.exact_mean for c in known], "x", color="black", label="exact")
    middle.set_ylabel("test log-likelihood")
    middle.legend(fontsize=8)
    # Differences from the exact value (or from AIS where it is unknown): the sandwich at the scale of its errors.
    exact_everywhere = all(c.exact_mean is not None for c in cs)
    ref = [c.exact_mean if exact_everywhere else c.ais_mean for c in cs]
    ref_at = dict(zip(steps, ref))
    if exact_everywhere:
        bottom.errorbar(steps, [c.ais_mean - r for c, r in zip(cs, ref)], yerr=[c.log_z_stderr for c in cs], fmt="o-",
                        color="tab:red", markersize=3, capsize=2, label="AIS ± s.e.")  # fmt: skip
    bottom.errorbar(steps, [c.bar_mean - r for c, r in zip(cs, ref)], yerr=[c.log_z_bar_stderr for c in cs], fmt="s--",
                    color="tab:purple", markersize=3, capsize=2, label="BAR ± s.e.")  # fmt: skip
    if raised:
        bottom.errorbar([c.step for c in raised], [c.raise_mean - ref_at[c.step] for c in raised],
                        yerr=[c.raise_stderr or 0.0 for c in raised], fmt="s", color="tab:blue", markersize=5,
                        capsize=3, label="RAISE ± s.e.")  # fmt: skip
    if report.closed:
        lo, hi = report.interval
        r = ref[-1]
        bottom.errorbar([cs[-1].step], [(lo + hi) / 2 - r], yerr=[[(hi - lo) / 2], [(hi - lo) / 2]], fmt="none",
                        ecolor="tab:green", elinewidth=8, alpha=0.35, label="certified interval (last)")  # fmt: skip
    bottom.axhline(0.0, color="black", linewidth=0.8, linestyle="--" if exact_everywhere else ":")
    bottom.set_ylabel("minus the exact log-likelihood" if exact_everywhere else "minus AIS's log-likelihood")
    bottom.set_xlabel("training step")
    by_name = {c.label: c.step for c in cs}
    for link in report.coarse_links:
        end = by_name.get(link.end)
        begin = by_name.get(link.start, steps[0])
        if end is not None:
            for ax in (top, middle, bottom):
                ax.axvspan(begin, end, color="tab:orange", alpha=0.15, linewidth=0)
    if report.coarse_links:
        bottom.plot([], [], color="tab:orange", alpha=0.3, linewidth=6, label="BAR: link too coarse")
    bottom.legend(fontsize=8)
    for ax in (top, middle, bottom):
        ax.grid(alpha=0.3)
    s = report.settings
    thinned = trajectory_thinning(s)  # which of the saved checkpoints, as the table says it
    which = f"{s['num_checkpoints']} checkpoints" + (f" ({render_names(thinned)})" if thinned else "")
    links = "adaptive links" if s.get("links") == "adaptive" else f"K = {s['steps']} sub-steps per link"
    top.set_title(
        f"{which}, {links}, {s['ais_chains']} chains; last checkpoint: {report.verdict}",
        fontsize=9,
    )
    fig.tight_layout()
    save_figure(fig, path, dpi=120)  # whole or not at all; marked: a later run may replace it


def plot_track(history, path: str, title: str) -> None:
    """A tracking monitor's records against the epoch (`LikelihoodMonitor(..., track=...)`): log Z ± s.e. with the
    exact value where known; below, the AIS log-likelihood (where log f(v) is exact), the exact one, and RAISE at
    the records that ran it; a PNG at `path`."""
    from matplotlib.ticker import MaxNLocator

    epochs = [r.epoch for r in history]
    fig = _figure((7, 6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.errorbar(epochs, [r.log_z for r in history], yerr=[r.log_z_stderr for r in history], fmt="o-", color="C3",
                 markersize=3, capsize=2, label="AIS, persistent chains ± s.e.")  # fmt: skip
    known = [r for r in history if r.log_z_exact is not None]
    if known:
        top.plot([r.epoch for r in known], [r.log_z_exact for r in known], "x", color="black", label="exact")
    top.set_ylabel("log Z")
    top.set_title(title, fontsize=8)
    top.legend(fontsize=8)
    top.grid(alpha=0.3)
    with_ais = [r for r in history if r.ais is not None]
    if with_ais:
        bottom.plot([r.epoch for r in with_ais], [r.ais for r in with_ais], "o-", color="C3", markersize=3,
                    label="AIS (optimistic)")  # fmt: skip
    raised = [r for r in history if r.raise_ is not None]
    if raised:
        bottom.errorbar([r.epoch for r in raised], [r.raise_ for r in raised], yerr=[r.raise_se or 0 for r in raised],
                        fmt="s", color="C0", markersize=5, capsize=3, label="RAISE (conservative) ± s.e.")  # fmt: skip
        for r in raised:
            bottom.annotate(r.verdict, (r.epoch, r.raise_), textcoords="offset points", xytext=(4, -12), fontsize=7)
    known = [r for r in history if r.exact is not None]
    if known:
        bottom.plot([r.epoch for r in known], [r.exact for r in known], "x", color="black", label="exact")
    bottom.set_ylabel("average test log-likelihood (nats)")
    bottom.set_xlabel("epoch (from 0)")
    if with_ais or raised or known:
        bottom.legend(fontsize=8)
    bottom.grid(alpha=0.3)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.tight_layout()
    save_figure(fig, path, dpi=100)  # whole or not at all
