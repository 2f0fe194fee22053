"""Adapters for the field's job-queue benchmark (hardbyte/postgresql-job-queue-benchmarking).

Each adapter is a long-running process speaking that harness's JSONL protocol (its
``CONTRIBUTING_ADAPTERS.md``): settings from the environment, one descriptor line, then a sample
line per metric every ``SAMPLE_EVERY_S``. ``bench/pressure.py`` runs them against a throw-away
cluster through the harness's phases; they run under the harness itself as they are.
"""
