"""hpctrain: submit distributed PyTorch training to Slurm and run it inside the allocation.

The Python API (hpctrain.api: `hpctrain.submit(...)`, `hpctrain.Run`, ...) is re-exported here on first
use, so that `import hpctrain` (and every CLI verb) pays nothing for it.
"""

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name.startswith("_"):  # dunder probes (copy, pickle, pytest) must not import the API
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}")
    import importlib

    api = importlib.import_module("hpctrain.api")  # `from hpctrain import api` would come back here
    if name == "api":
        return api
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    import importlib

    api = importlib.import_module("hpctrain.api")
    return sorted({*globals(), *api.__all__})
