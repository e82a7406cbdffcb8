"""Certified evaluation: the sandwich run at growing K until it closes within a tolerance, or a reason why not.

settings.py (`CertifySettings`), verdict.py (when a sandwich is closed; the interval; the gap's trend), report.py
(`CertifyStep`, `Certificate`: data), run.py (`certify`). May import the core, `evaluation` and `runtime`; never
the CLI or the renderers (the report's `format_table`/`plot` call `raise_eval.render` lazily).
"""

from raise_eval.certification.report import Certificate, CertifyFailed, CertifyInterrupted, CertifyStep
from raise_eval.certification.run import certify
from raise_eval.certification.settings import CertifySettings
from raise_eval.certification.verdict import UNDERMINING, closure_reasons

__all__ = [
    "Certificate",
    "CertifyFailed",
    "CertifyInterrupted",
    "CertifySettings",
    "CertifyStep",
    "UNDERMINING",
    "certify",
    "closure_reasons",
]
