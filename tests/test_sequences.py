"""Alignments as the data of categorical layers: FASTA read without regard to case ('.' a gap), A2M and A3M with
their lower-case and '.' insertions removed, gzipped files, and what is refused."""

import gzip

import pytest
import torch

from raise_eval.io.arrays import DataError
from raise_eval.io.sequences import is_sequence_file, read_alignment, resolve_alphabet, sequence_format


def _write(path, text):
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def test_fasta_is_read_without_regard_to_case(tmp_path):
    path = _write(tmp_path / "a.fasta", ">one\nAC-G\n>two description\nac\n.t\n\n")
    codes = read_alignment(path, "-ACGT")
    assert torch.equal(codes, torch.tensor([[1, 2, 0, 3], [1, 2, 0, 4]]))


@pytest.mark.parametrize("suffix", [".a2m", ".a3m", ".a2m.gz"])
def test_a2m_and_a3m_insertions_are_removed(tmp_path, suffix):
    path = _write(tmp_path / f"a{suffix}", ">one\nAC-G\n>two\nAcg.C--\n>three\nttA-GT..\n")
    codes = read_alignment(path, "-ACGT")
    assert torch.equal(codes, torch.tensor([[1, 2, 0, 3], [1, 2, 0, 0], [1, 0, 3, 4]]))


def test_the_shared_protein_family_reads_with_the_protein_alphabet(shared_data):
    codes = read_alignment(shared_data / "protein" / "PF00014_mgap6.fasta.gz", "protein")
    assert codes.shape == (13600, 53) and int(codes.max()) <= 20
    assert int(torch.unique(codes, dim=0).shape[0]) == 8871  # the README's distinct sequences


@pytest.mark.parametrize(
    "text,message",
    [
        (">a\nACGT\n>b\nACG\n", "sequence 1 .b. has 3 aligned positions but the first has 4"),
        (">a\nACXT\n", "holds 'X' at aligned position 2, which is not in the alphabet"),
        ("ACGT\n", "before the first '>' header"),
        ("", "holds no sequences"),
    ],
)
def test_bad_alignments_are_refused_saying_where(tmp_path, text, message):
    with pytest.raises(DataError, match=message):
        read_alignment(_write(tmp_path / "bad.fasta", text), "-ACGT")


def test_names_and_alphabets():
    assert sequence_format("x.fa.gz") == "fasta" and sequence_format("x.A3M") == "a3m"
    assert is_sequence_file("fam.a2m") and not is_sequence_file("data.npy")
    assert resolve_alphabet("protein") == "-ACDEFGHIKLMNPQRSTVWY" and resolve_alphabet("RNA") == "-ACGU"
    assert resolve_alphabet("XYZ") == "XYZ"
    with pytest.raises(ValueError, match="repeats"):
        resolve_alphabet("AAB")


def test_a_damaged_gzip_alignment_is_refused_naming_the_file(tmp_path):
    """Issue 45, bug 1: a gzip header over damaged compressed data raised zlib.error."""
    data = bytearray(gzip.compress(b"".join(b">s%d\nACGTACGTAC\n" % i for i in range(200))))
    for i in range(20, len(data) - 10):  # the header stays intact, the deflate stream does not
        data[i] ^= 0x5A
    path = tmp_path / "corrupt.fasta.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"corrupt\.fasta\.gz: its gzip-compressed data are damaged"):
        read_alignment(path, "-ACGT")


@pytest.mark.parametrize("suffix", [".fasta", ".a2m"])
def test_a_lower_case_alphabet_reads_the_upper_case_columns(tmp_path, suffix):
    """Issue 45: a lower-case alphabet refused every residue, though letters are read without regard to case."""
    path = _write(tmp_path / f"a{suffix}", ">one\nAC-G\n>two\nAC-T\n")
    assert torch.equal(read_alignment(path, "-acgt"), read_alignment(path, "-ACGT"))
    with pytest.raises(DataError, match="symbols that differ only in case"):
        read_alignment(path, "-aAGT")


def test_an_alignment_of_the_wrong_length_names_the_file_and_both_lengths(tmp_path):
    """Issue 45: the model's size check named neither the file nor the length, and suggested a fix for arrays."""
    path = _write(tmp_path / "long.fasta", ">one\nACGTACG\n")
    with pytest.raises(DataError, match=r"long\.fasta: the sequences have 7 aligned positions but the model has 5 "
                                         "sites; give an alignment of the model's 5 columns"):  # fmt: skip
        read_alignment(path, "-ACGT", sites=5)
    assert read_alignment(path, "-ACGT", sites=7).shape == (1, 7)
