"""``python -m harel_sa``: the ``harel-sa`` command."""

from harel_sa.cli import main

if __name__ == "__main__":  # a demo child process imports this module too
    raise SystemExit(main())
