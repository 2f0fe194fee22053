"""The PostgreSQL backend (``pip install 'harel-sa[postgres]'``): psycopg 3 and its pools.

Imports nothing of the SQLite runtime: only the shared rooms (schema, state, errors, events,
validate, settlements).
"""
