"""``harel-sa web``: a page of a queue's state, and its operator actions behind a token.

``view`` gathers what the page shows, ``guard`` decides who may see and change it, ``app``
serves it (the ``web`` extra: Starlette, Jinja2, Uvicorn); ``templates/`` holds the HTML.
Nothing here is imported by ``import harel_sa``.
"""
