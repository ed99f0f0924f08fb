"""``python -m hpcsolve ARGS`` is ``hpcsolve ARGS``: the same command line, the same exit codes (0 done, 2 bad input,
3 a run that failed its check; ``hpcsolve --help``). For an environment whose ``bin/`` is not on PATH."""

from hpcsolve.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
