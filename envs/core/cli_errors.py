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


def run_handled(prog: str, command: Callable[[], int | None], interrupted: str = INTERRUPTED) -> int:
    """Run ``command`` (no arguments); its exit status, 2 after an expected error, 130 after Ctrl-C — each
    reported as one line ``<prog>: error: …`` / ``<prog>: <interrupted>`` on stderr."""
    log = logging.getLogger("kairos")
    try:
        return int(command() or 0)
    except KeyboardInterrupt:
        log.debug("interrupted", exc_info=True)
        print(f"{prog}: {interrupted}", file=sys.stderr, flush=True)
        return 130
    except EXPECTED_ERRORS as e:
        log.debug("error", exc_info=True)
        print(f"{prog}: error: {error_line(e)}", file=sys.stderr, flush=True)
        return 2
