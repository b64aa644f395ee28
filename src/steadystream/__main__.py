"""``python -m steadystream``: the same as the ``steadystream`` command."""

from steadystream.cli import main

if __name__ == "__main__":
    main()
