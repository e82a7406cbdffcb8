"""Sequence alignments as the data of categorical (Potts) layers: FASTA, A2M and A3M files (gzipped or not) read
into integer codes with an alphabet, one row per sequence, one column per aligned position.

- FASTA (.fasta, .fa, .faa, .fas, .aln): every character of a sequence is a column. Letters are read without
  regard to case (upper-cased), and '.' is read as the gap '-' (some tools write gaps as dots).
- A2M (.a2m): upper-case letters and '-' are the match (aligned) columns; lower-case letters and '.' are insertions
  relative to the match states and are removed, as HMMER and HH-suite read them.
- A3M (.a3m): upper-case letters and '-' are the columns; lower-case letters are insertions and are removed ('.'
  too, should one appear).

Header lines start with '>'; a sequence may span several lines; blank lines are skipped. After the insertions are
removed every sequence must have the same length L, the model's number of sites; a symbol that is not in the
alphabet is refused, naming the sequence, the column and the symbol (replace it, e.g. 'X' by '-', or give an
alphabet that holds it). Alphabets: `protein` (-ACDEFGHIKLMNPQRSTVWY, q = 21, the gap first), `rna` (-ACGU), `dna`
(-ACGT), or the q symbols of the model's states in order.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import Optional, Union

import numpy as np
import torch
from torch import Tensor

from raise_eval.io.arrays import DataError
from raise_eval.models.boltzmann.units import ALPHABETS
from raise_eval.models.io.files import why_unusable

SEQUENCE_FORMATS = {".fasta": "fasta", ".fa": "fasta", ".faa": "fasta", ".fas": "fasta", ".aln": "fasta",
                    ".a2m": "a2m", ".a3m": "a3m"}  # fmt: skip


def sequence_format(name: Union[str, Path]) -> str | None:
    """'fasta', 'a2m' or 'a3m' from the file name (a .gz suffix is looked through), or None."""
    suffixes = [s.lower() for s in Path(name).suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return SEQUENCE_FORMATS.get(suffixes[-1]) if suffixes else None


def is_sequence_file(name: Union[str, Path]) -> bool:
    """Whether a --data value names an alignment file (FASTA, A2M or A3M, gzipped or not)."""
    return sequence_format(name) is not None


def resolve_alphabet(alphabet: str) -> str:
    """The symbols of an alphabet given by name (protein, rna, dna) or as its symbols; ValueError when they
    repeat."""
    symbols = ALPHABETS.get(alphabet.strip().lower(), alphabet) if isinstance(alphabet, str) else None
    if not symbols:
        raise ValueError(f"an alphabet is a name ({', '.join(ALPHABETS)}) or the states' symbols in order, got "
                         f"{alphabet!r}")  # fmt: skip
    if len(set(symbols)) != len(symbols):
        raise ValueError(f"the alphabet {symbols!r} repeats a symbol")
    return symbols


def _records(path: Path):
    opener = gzip.open if path.suffix.lower() == ".gz" else open
    name, parts = None, []
    try:
        with opener(path, "rt", encoding="ascii", errors="strict") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                if line.startswith(">"):
                    if name is not None:
                        yield name, "".join(parts)
                    name, parts = line[1:].strip(), []
                elif name is None:
                    raise DataError(f"{path}: sequence text before the first '>' header; is this a FASTA file?")
                else:
                    parts.append(line)
    except zlib.error as e:  # a gzip header over damaged compressed data (gzip raises neither OSError nor EOFError)
        raise DataError(f"{path}: its gzip-compressed data are damaged ({e}); get the file again") from None
    except (UnicodeDecodeError, OSError, EOFError) as e:
        raise DataError(f"{path} cannot be read as a text alignment ({type(e).__name__}: {e})") from None
    if name is not None:
        yield name, "".join(parts)


def _aligned(text: str, fmt: str) -> str:
    if fmt == "fasta":
        return text.upper().replace(".", "-")
    return "".join(c for c in text if not (c.islower() or c == "."))  # a2m, a3m: insertions removed


def read_alignment(path: Union[str, Path], alphabet: str, sites: Optional[int] = None) -> Tensor:
    """Integer codes (N, L), int64, of the aligned sequences in a FASTA, A2M or A3M file (see the module
    docstring): code a is the a-th symbol of `alphabet` (a name or the symbols; its letters matched without regard
    to case). With `sites`, L must be that many (the model's). DataError says what is wrong."""
    path = Path(path)
    unusable = why_unusable(path)
    if unusable == "does not exist":
        raise FileNotFoundError(f"alignment {path} does not exist")
    if unusable is not None:
        raise DataError(f"alignment {path} {unusable}; give a FASTA, A2M or A3M file")
    fmt = sequence_format(path) or "fasta"
    symbols = resolve_alphabet(alphabet)
    lookup = np.full(128, -1, dtype=np.int64)
    for code, symbol in enumerate(symbols):
        if len(symbol.encode()) != 1 or ord(symbol) >= 128:
            raise DataError(f"the alphabet's symbols must be single ASCII characters, got {symbol!r}")
        lookup[ord(symbol.upper())] = code  # the aligned columns are upper case: so is a lower-case alphabet's match
    if len(set(symbols.upper())) != len(symbols):
        raise DataError(
            f"the alphabet {symbols!r} has symbols that differ only in case; alignments are read without regard to "
            "case (and in A2M and A3M files lower case marks insertions): give an alphabet of distinct letters"
        )
    rows, length = [], None
    for i, (name, text) in enumerate(_records(path)):
        seq = _aligned(text, fmt)
        if length is None:
            length = len(seq)
        if len(seq) != length:
            raise DataError(
                f"{path}: sequence {i} ({name[:40]}) has {len(seq)} aligned positions but the first has {length}"
                + (" (after removing the lower-case and '.' insertions)" if fmt != "fasta" else "")
                + "; an alignment's sequences have one length"
            )
        raw = np.frombuffer(seq.encode("ascii"), dtype=np.uint8)
        codes = lookup[raw]
        if (codes < 0).any():
            j = int(np.nonzero(codes < 0)[0][0])
            raise DataError(
                f"{path}: sequence {i} ({name[:40]}) holds {seq[j]!r} at aligned position {j}, which is not in the "
                f"alphabet {symbols!r}; replace it (e.g. by '-') or give an alphabet that holds it"
            )
        rows.append(codes)
    if not rows:
        raise DataError(f"{path} holds no sequences")
    if length == 0:
        raise DataError(f"{path}: the sequences have no aligned positions")
    if sites is not None and length != sites:
        raise DataError(
            f"{path}: the sequences have {length} aligned positions"
            + (" (after removing the lower-case and '.' insertions)" if fmt != "fasta" else "")
            + f" but the model has {sites} sites; give an alignment of the model's {sites} columns"
        )
    return torch.from_numpy(np.stack(rows))
