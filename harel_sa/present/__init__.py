"""What the operator's views show, read by both the ``harel-sa`` commands and the web view:
times, ages, counts and events in words (:mod:`~harel_sa.present.format`), rates
(:mod:`~harel_sa.present.rates`). It imports neither of them, nor any dialect."""
