"""The top-level handler's line stands on a line of its own, whatever progress bar was being drawn."""

from __future__ import annotations

import sys

from tqdm import tqdm

from envs.core.cli_errors import run_handled


def _interrupted_mid_bar(exc: BaseException):
    def command():
        bar = tqdm(total=400, desc="test CoT", leave=False, file=sys.stderr)
        bar.refresh()
        raise exc
    return command


def test_ctrl_c_line_starts_after_a_live_progress_bar(capsys):
    assert run_handled("kairos bench", _interrupted_mid_bar(KeyboardInterrupt()), "interrupted — rerun") == 130
    lines = capsys.readouterr().err.splitlines()
    assert "kairos bench: interrupted — rerun" in lines, lines


def test_error_line_starts_after_a_live_progress_bar(capsys):
    assert run_handled("kairos bench", _interrupted_mid_bar(ValueError("bad slice 'test'"))) == 2
    lines = capsys.readouterr().err.splitlines()
    assert "kairos bench: error: bad slice 'test'" in lines, lines
