"""The benchmarks: one script per measurement, and the modules they share.

Every script runs both ways, with the same flags::

    python bench/bench_x.py --help
    python -m bench.bench_x --help

Run as a file, Python puts ``bench/`` itself (not the repository) first on ``sys.path``, so
each script opens with the one line that swaps the two before it imports ``bench``::

    if not __package__:  # run as a file: the repository first on sys.path, not bench/
        sys.path[0] = str(Path(__file__).resolve().parents[1])

Each script's entry is ``main(argv) -> int`` (``bench._cli.entry``: bad input is one
``error:`` line and status 2), its parser ``bench._cli.parser`` (help shows the defaults).
The library is imported through its public modules only; the benchmarks are not part of
the installed package.
"""
