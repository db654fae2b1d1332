import sys


def run() -> None:
    """The `amp-lint` command. `amp-lint server` answers the editor's `initialize` before anything heavy is
    imported (click and the cli included): `amp_lint.server.fast_start`."""
    if sys.argv[1:] == ["server"]:
        from amp_lint.server import serve

        sys.exit(serve())
    from amp_lint.cli import main

    main()


if __name__ == "__main__":
    run()
