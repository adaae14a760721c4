"""Helpers shared by the test modules, one topic a module; a test imports what it uses from the topic module
(``from helpers.paths import ROOT``), never from another test module or from ``conftest``.

- ``paths``: the project root, its config folder, the test-session model cache.
- ``records``: JSONL files written and read, folders compared byte for byte, results without their timings, a
  minimal RULER row and task file.
- ``configs``: the stage configs composed with Hydra's compose API, with every folder in a temporary one; config
  options and modules from outside the project (plug-ins).
- ``cli``: the stage scripts (``exp/exp2/*.py``) run as a user runs them, in a child process.
- ``tiny_models``: tiny randomly initialised decoders, fake tokenizers, toy model inputs, the attribution methods by
  name, a short story for the real SmolLM2.
- ``retrieval``: real text (the offline Wikipedia summaries) as corpus and queries, a small retrieval folder.

tests/ has no ``__init__.py``: pytest (its default "prepend" import mode) puts tests/ itself on ``sys.path`` when it
imports tests/conftest.py and the test modules, so ``import helpers`` finds this package there, and a child process
started by a test finds it on the ``PYTHONPATH`` its test gives it. The plug-in modules (tests/plugin_*.py) stay
beside the tests: configs name them by ``_target_`` as top-level modules.
"""
