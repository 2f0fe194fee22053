"""harel_sa's transports in the worker processes that harel's own tests start.

harel's multi-process tests start their workers (``test/integration/_worker_main.py``) with
PYTHONPATH set to the source distribution's ``src`` and ``test`` folders alone, so no pytest
plugin and no PYTHONPATH of ours reaches them. tests/harel/test_upstream.py links this file into
that ``test`` folder, and Python imports a ``sitecustomize`` module at start-up in every
process. It does nothing unless ``HAREL_SA_SWAP`` is set (by swap.py, in the test process whose
environment the workers inherit); then it makes the same swap as swap.py, found beside the
link's target. (This folder is on the test process's PYTHONPATH too, for the plugins: a process
started with that PYTHONPATH swaps the same way.)
"""

import os
import sys

if os.environ.get("HAREL_SA_SWAP"):
    sys.path.append(os.path.dirname(os.path.realpath(__file__)))
    from swap import swap_in_harel_sa

    swap_in_harel_sa()
