import errno
import os
import sys

EXIT_ERROR = 2  # the tool could not do its job (0 clean and 1 findings are the command's own answers)


def run() -> None:
    """The `amp-lint` command. `amp-lint server` answers the editor's `initialize` before anything heavy is
    imported (click and the cli included): `amp_lint.server.fast_start`.

    Whatever goes wrong unexpectedly ends in one line on standard error and exit 2, never a traceback and never
    exit 1 (which says "findings remain"): a CI step must not read a crash as a finding, nor as a pass."""
    if _stdout_closed():
        _say("amp-lint: error: standard output is closed (`>&-`): redirect it (`>/dev/null`) or use -o FILE")
        sys.exit(EXIT_ERROR)
    try:
        if sys.argv[1:] == ["server"]:
            from amp_lint.server import serve

            sys.exit(serve())
        from amp_lint.cli import main

        main()
    except SystemExit:
        raise
    except KeyboardInterrupt:
        _say("amp-lint: interrupted")
        sys.exit(130)
    except OSError as error:
        if error.filename is None and error.errno in (errno.ENOSPC, errno.EIO, errno.EBADF, errno.EPIPE, errno.EFBIG):
            # A write to standard output or error failed (`>/dev/full`, a closed pipe): say so where we still can.
            _say(f"amp-lint: error: cannot write the output: {error.strerror or error}")
        else:
            _say(f"amp-lint: error: {_one_line(error)}")
        _exit_quietly(EXIT_ERROR)
    except RecursionError:
        _say("amp-lint: error: internal error: RecursionError (input nested too deeply)")
        _exit_quietly(EXIT_ERROR)
    except Exception as error:  # our bug: one line that names it, and exit 2
        _say(f"amp-lint: error: internal error: {type(error).__name__}: {_one_line(error)}")
        _exit_quietly(EXIT_ERROR)


def _stdout_closed() -> bool:
    """Whether the command started without a standard output (file descriptor 1 closed). The first file opened
    would then take descriptor 1, and a stray print would write into it: descriptor 1 is taken by /dev/null
    before anything else runs, and the run refuses."""
    try:
        os.fstat(1)
    except OSError:
        try:
            os.open(os.devnull, os.O_WRONLY)  # takes the lowest free descriptor: 1
        except OSError:
            pass
        return True
    return False


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] + "..." if len(text) > 300 else text or type(error).__name__


def _say(line: str) -> None:
    """One line on standard error, if there is one to write to."""
    try:
        if sys.stderr is not None:
            sys.stderr.write(line.replace("\n", " ") + "\n")
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _exit_quietly(code: int) -> None:
    """Exit without the interpreter's own complaint about a standard output it cannot flush at shutdown."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError, AttributeError):
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
