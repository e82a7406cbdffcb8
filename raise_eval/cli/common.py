"""What the subcommands share: the thread count chosen once per run, and writing a report's JSON and plot."""

from __future__ import annotations

import os
from typing import Optional

import torch

from raise_eval.cli.options import note
from raise_eval.io.results import dump_json
from raise_eval.models import native
from raise_eval.runtime import product_routes
from raise_eval.runtime.threads import resolve_threads
from raise_eval.settings import render_names


def check_environment() -> None:
    """RAISE_EVAL_NATIVE and RAISE_EVAL_PRODUCT_ROUTE read before any work (ValueError naming the variable and
    what it takes), not first where a stage needs the kernels or a product."""
    native.requested()
    product_routes.requested_route()


def configure_threads(threads) -> None:
    """Set torch's thread count for the whole run, once ('auto': the cores no other process is using now); the
    settings then carry None (torch's setting) so that nothing below changes it again."""
    cores = os.cpu_count() or 1
    if isinstance(threads, int) and threads > cores:
        note(f"--threads {threads} exceeds the {cores} cores of this machine; the threads will fight for cores and "
             "the run will be slower")  # fmt: skip
    torch.set_num_threads(resolve_threads(threads, torch.get_num_threads()))
    return None


def announce_null_outputs(outputs, names: dict[str, str]) -> None:
    """Say which outputs were given as the null device (nothing is written for them), before any work."""
    for output in outputs.null:
        note(f"{render_names(output, names)} is the null device: nothing will be written")


def write_report(report, json_path: Optional[str], plot_path: Optional[str], names: dict[str, str],
                 qualifier: Optional[str] = None) -> None:  # fmt: skip
    """Write `report`'s JSON document (settings named as `names`) and its plot, saying what was written."""
    suffix = f" ({qualifier})" if qualifier else ""
    if json_path:
        dump_json(report.to_dict(names), json_path)
        print(f"wrote {json_path}{suffix}")
    if plot_path:
        report.plot(plot_path)
        print(f"wrote {plot_path}")
