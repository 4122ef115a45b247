"""``python -m ragassay ...``: the same command line as the ``ragassay`` script."""

from ragassay.cli.app import console_main

if __name__ == "__main__":
    console_main()
