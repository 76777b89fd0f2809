"""hpctrain: submit distributed PyTorch training to Slurm and run it inside the allocation.

The Python API (hpctrain.api: `hpctrain.submit(...)`, `hpctrain.Run`, ...) is re-exported here on first
use, so that `import hpctrain` (and every CLI verb) pays nothing for it.
"""

import importlib
import importlib.util
from typing import Any

from hpctrain.version import __version__ as __version__


def __getattr__(name: str) -> Any:
    if name == "api":
        return importlib.import_module("hpctrain.api")
    # Dunder probes (copy, pickle, pytest), and `from hpctrain import spec` before hpctrain.spec is
    # loaded (the import system asks here first): neither may import the API, which the allocation
    # side never loads.
    if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is not None:
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}")
    api = importlib.import_module("hpctrain.api")
    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'hpctrain' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    api = importlib.import_module("hpctrain.api")
    return sorted({*globals(), *api.__all__})
