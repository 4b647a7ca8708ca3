"""The one top-level handler of every entry point (``kairos``, ``python -m train``, the ``python -m eval…`` tools).

An error a user can fix — a bad value (``ValueError``: every config, data, policy-mismatch and worker error derives
from it), a missing key, a file, folder or service problem (``OSError``: ``FileNotFoundError``, ``FileExistsError``,
``ConnectionError``, ``TimeoutError``) — is one ``<prog>: error: …`` line on stderr and exit status 2; Ctrl-C is one
line and exit status 130. The traceback is logged at debug level: ``-v`` shows it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

#: errors a user can fix: one line, no traceback
EXPECTED_ERRORS = (ValueError, KeyError, OSError)
#: what Ctrl-C prints when the command cannot say more
INTERRUPTED = "interrupted"


def error_line(e: BaseException) -> str:
    """The one-line message of an expected error (an OS error names its path and cause)."""
    from envs.core.io import describe_os_error

    if isinstance(e, KeyError) and len(e.args) == 1 and isinstance(e.args[0], str):
        return e.args[0]  # str(KeyError) is the repr of its message: quoted, escaped
    return describe_os_error(e) if isinstance(e, OSError) else str(e) or type(e).__name__


def _close_progress_bars() -> None:
    """Close every live tqdm bar, so the handler's line starts on a line of its own (a bar interrupted mid-draw
    leaves the cursor after its text; closing it clears or ends that line)."""
    tqdm_module = sys.modules.get("tqdm.std")
    if tqdm_module is None:
        return
    for bar in list(getattr(tqdm_module.tqdm, "_instances", ())):
        try:
            bar.close()
        except Exception:  # noqa: BLE001 - a bar that cannot close must not hide the message
            pass


def _own_line(text: str) -> None:
    _close_progress_bars()
    print(text, file=sys.stderr, flush=True)


def run_handled(prog: str, command: Callable[[], int | None], interrupted: str = INTERRUPTED) -> int:
    """Run ``command`` (no arguments); its exit status, 2 after an expected error, 130 after Ctrl-C — each
    reported as one line ``<prog>: error: …`` / ``<prog>: <interrupted>`` on stderr."""
    log = logging.getLogger("kairos")
    try:
        return int(command() or 0)
    except KeyboardInterrupt:
        log.debug("interrupted", exc_info=True)
        _own_line(f"{prog}: {interrupted}")
        return 130
    except EXPECTED_ERRORS as e:
        log.debug("error", exc_info=True)
        _own_line(f"{prog}: error: {error_line(e)}")
        return 2
