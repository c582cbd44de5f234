"""``benchmarks.predict_accuracy``'s choices: an unknown runtime source or trace is refused
naming the option and the value, before anything is replayed."""

from __future__ import annotations

import pytest

from benchmarks.predict_accuracy import main


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--modes", "known,guessed"], "--modes: unknown runtime source 'guessed'"),
        (["--traces", "philly"], "--traces: unknown trace 'philly'"),
    ],
)
def test_an_unknown_choice_is_refused_by_name(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr()
    assert said in err.err
    assert "trace " not in err.out  # no header: nothing replayed
