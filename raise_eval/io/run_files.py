"""The files a command writes, declared once (`OutputSettings`: --json, --plot, --resume-file, --overwrite) and
checked before any work (`raise_eval.io.outputs.check_output_path`: a regular file or nothing yet, in a folder
raise-eval can write; the null device means no output), and against the run's inputs and what exists
(`check_outputs`: an input, a duplicate, a file raise-eval did not write)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from raise_eval.io.outputs import Output, OutputError, check_output_path, check_outputs
from raise_eval.settings import SettingsError, setting, settings_class

PLOT_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
OVERWRITE_HELP = (
    "replace an existing --json or --plot file that raise-eval did not write (without it such a file is refused "
    "before any work; raise-eval's own results are replaced without asking). The run's inputs (the checkpoint, the "
    "data) are never overwritten"
)


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@settings_class
class OutputSettings:
    """What a command writes besides its table."""

    json: Optional[str] = setting(
        None, "also write the results as JSON to OUT", kind="path", none="no JSON", flag="--json", metavar="OUT",
        group="output",
    )  # fmt: skip
    plot: Optional[str] = setting(
        None,
        "plot the results: a certified run's bounds against K (evaluate with --until-gap), bdmc's bounds against K, "
        "trajectory's estimates against the training step; needs matplotlib (pip install -e \".[plot]\")",
        kind="path", none="next to --json when matplotlib is installed", flag="--plot", metavar="PNG", group="output",
    )  # fmt: skip
    resume_file: Optional[str] = setting(
        None,
        "save every finished shard to FILE (atomically), and the annealing state of the shard in progress every "
        "--resume-interval seconds and at Ctrl-C (which then stops after the current step; press it twice to stop "
        "at once), and continue from it when the same command is run again: the final numbers equal an "
        "uninterrupted run's (a finished run's file is read back: delete it to recompute). A file from other "
        "settings is refused, naming what differs. Under torchrun each rank keeps FILE.rank<r>-of-<N>: continue "
        "with the same number of processes",
        kind="path", none="no resume file", flag="--resume-file", metavar="FILE", group="large runs",
    )  # fmt: skip
    overwrite: bool = setting(False, OVERWRITE_HELP, kind="flag", flag="--overwrite", group="output")
    null: tuple = setting((), "the outputs given as the null device (/dev/null): nothing is written for them",
                          kind="any")  # fmt: skip

    def _validate(self) -> None:
        null = list(self.null)
        for field in ("json", "plot", "resume_file"):
            path = getattr(self, field)
            try:
                writable = not path or check_output_path(path, f"{{{field}}}")
            except OutputError as e:
                raise SettingsError(str(e), (field,)) from None
            if not writable:  # the null device: no output, said by the caller
                null.append(f"{{{field}}} {path}")
                object.__setattr__(self, field, None)
        object.__setattr__(self, "null", tuple(null))
        if self.plot:
            if not have_matplotlib():
                raise SettingsError(
                    "{plot} needs matplotlib: pip install matplotlib (or the extra: pip install -e .[plot])"
                )
            if Path(self.plot).suffix.lower() not in PLOT_SUFFIXES:
                raise SettingsError(f"{{plot}} {self.plot}: name a .png, .pdf, .svg or .jpg file")

    @property
    def plot_path(self) -> Optional[str]:
        """--plot, or by default a PNG next to --json when matplotlib is installed; None for no plot."""
        if self.plot:
            return self.plot
        if self.json and have_matplotlib():
            return str(Path(self.json).with_suffix(".png"))
        return None

    def check_against(self, inputs: list[tuple[str, Optional[str]]]) -> None:
        """The files this run will write, against its inputs and what exists (`raise_eval.io.outputs`), before any
        work; SettingsError (naming the output) when one would cost work."""
        outputs = [Output("{json}", self.json, "json"), Output("{resume_file}", self.resume_file, "resume")]
        plot = self.plot_path
        if plot:
            outputs.append(Output("{plot}" if self.plot else "{json}'s plot (name it with {plot})", plot, "plot"))
        try:
            check_outputs(outputs, inputs, overwrite=self.overwrite)
        except OutputError as e:
            raise SettingsError(str(e).replace("--overwrite", "{overwrite}")) from None
