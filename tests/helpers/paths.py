"""Where the tests find the project and keep what outlives a session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the project (tests/helpers/paths.py -> the checkout)
CONF = ROOT / "conf"  # the stage configs and their groups
# dequantised models and embeddings: kept between sessions (dequantising SmolLM2 takes a while), never the project's
CACHE_DIR = Path(os.environ.get("CTXBENCH_TEST_CACHE") or Path(tempfile.gettempdir()) / "ctxbench-test-cache")
