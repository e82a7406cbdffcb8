"""The command line's parsing: a mistyped option is refused by its command, with the nearest option it has."""

import pytest

from raise_eval.cli import main


@pytest.mark.parametrize("argv, words", [
    (["evaluate", "--model", "m.py:make", "--data", "t.npy", "--stpes", "10"],
     "raise-eval evaluate: error: unrecognized arguments: --stpes (did you mean --steps?)\n"),
    (["evaluate", "--ais-chians=3", "x.pt"],
     "raise-eval evaluate: error: unrecognized arguments: --ais-chians=3 (did you mean --ais-chains?)"),
    (["bdmc", "--stepz", "3", "x.pt"],
     "raise-eval bdmc: error: unrecognized arguments: --stepz (did you mean --steps?)"),
    (["evaluate", "--zzzz", "x.pt"], "raise-eval evaluate: error: unrecognized arguments: --zzzz\n"),
    (["evaluate", "a.pt", "b.pt"], "raise-eval evaluate: error: unrecognized arguments: b.pt\n"),
    # a shortened option was taken silently for the one it begins (argparse's abbreviations): now refused by name
    (["evaluate", "--ais-chain", "100", "x.pt"],
     "raise-eval evaluate: error: unrecognized arguments: --ais-chain (did you mean --ais-chains?)"),
])  # fmt: skip
def test_an_unknown_option_is_refused_with_the_nearest_known_one(capsys, argv, words):
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and words in err, err
    assert f"usage: raise-eval {argv[0]}" in err  # the command's usage, not the top level's
