"""The ``pld`` command: certified privacy accounting from the shell.

Every subcommand prints a human report by default and JSON with ``--json``.
Errors exit with status 2 and one line ``pld: error: ...`` on stderr (set
``PLD_TRACEBACK=1`` to see a traceback for unexpected errors); output files
(plots, CSV, saved PLDs) are written atomically, never partially.

The command is split over modules: :mod:`pld.cli.args` (parser class, argument
types), :mod:`pld.cli.parser` (one function per subcommand),
:mod:`pld.cli.commands` and :mod:`pld.cli.sweep` (the subcommands),
:mod:`pld.cli.util` (shared helpers); this module is the entry point.
"""

from __future__ import annotations

import os
import sys

from pld.cli.args import CLIError
from pld.cli.parser import build_parser
from pld.cli.util import _STARTED, _config  # noqa: F401  (_config: part of the tested surface)

__all__ = ["main", "build_parser"]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def main(argv=None) -> int:
    """Entry point of the ``pld`` console script; returns the exit status."""
    import time
    import warnings

    _STARTED[:] = [(time.perf_counter(), not _STARTED)]

    try:
        with warnings.catch_warnings():
            if not os.environ.get("PLD_TRACEBACK"):
                # numpy floating-point chatter (overflow in exp, inf casts) is not actionable for
                # a shell user and would break the "one line on stderr" contract
                warnings.simplefilter("ignore", RuntimeWarning)
            parser = build_parser()
            args = parser.parse_args(argv)
            if not getattr(args, "command", None):
                raise CLIError("choose a command: dpsgd, calibrate, compose, curve, lab, compare, sweep "
                               "(see 'pld --help')")
            if args.command not in ("warm", "tune-fft"):
                import pld

                # a cold kernel cache compiles in parallel processes, said in one line on
                # stderr (about 1 ms when the cache is warm)
                pld.warm(announce=True)
            return args.func(args)
    except SystemExit as exc:  # --help / --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        sys.stderr.write("pld: error: interrupted\n")
        return 130
    except BrokenPipeError:  # e.g. `pld curve --csv | head -2`
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1
    except (CLIError, ValueError, TypeError, OSError, MemoryError, RuntimeError) as exc:
        if os.environ.get("PLD_TRACEBACK") and not isinstance(exc, CLIError):
            raise
        sys.stderr.write(f"pld: error: {_one_line(exc)}\n")
        return 2
    except Exception as exc:  # unexpected: still one line unless asked for the traceback
        if os.environ.get("PLD_TRACEBACK"):
            raise
        sys.stderr.write(f"pld: error: internal error ({type(exc).__name__}): {_one_line(exc)} "
                         f"(set PLD_TRACEBACK=1 for details)\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
