"""Reading spec and site YAML as untrusted input: bounded size and depth, no duplicate keys, literal env.

PyYAML alone expands aliases without limit (a few hundred bytes can stand for gigabytes), lets a
repeated key silently win and reads YAML 1.1 words (`on`, `0755`) as booleans and octal numbers.
Here the document is composed into nodes and built by hand, so each of those is caught and
reported in one line naming the file and the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from hpctrain.errors import SpecError

MAX_FILE_BYTES = 1 << 20
MAX_NODES = 100_000
"""Values in the document after aliases are expanded: a real spec has a few hundred."""
MAX_CHARS = 4 << 20
"""Characters of text after aliases are expanded."""
MAX_DEPTH = 40

# Mappings whose values are environment variables: their scalars are kept as written
# (`umask: 0755` stays "0755", `FLAG: on` stays "on"), never read as YAML 1.1 numbers or booleans.
LITERAL_MAPS: frozenset[tuple[str, ...]] = frozenset(
    {("env",), ("network", "nccl_env"), ("network", "ucx_env")}
)

_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_TYPED = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool", _NULL}
# Dates and timestamps stay text: Slurm reads `2026-01-01T10:00` itself.
_TEXT = {_STR, "tag:yaml.org,2002:timestamp"}


def loader_class() -> Any:
    """A safe YAML loader that reads `02:00:00` as a string, not YAML 1.1's base-60 integer 7200."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type,misc]
        pass

    Loader.yaml_implicit_resolvers = {
        first: [
            (tag, rx)
            for tag, rx in resolvers
            if tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
        ]
        for first, resolvers in base.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:int",
        re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"),
        list("-+0123456789"),
    )
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
            r"|\.[0-9_]+(?:[eE][-+][0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    return Loader


_LOADER: Any = None


def _loader() -> Any:
    global _LOADER
    if _LOADER is None:
        _LOADER = loader_class()
    return _LOADER


def read_text(path: Path) -> str:
    """The file's text (UTF-8), or a one-line SpecError naming the file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a YAML file") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > MAX_FILE_BYTES:
        raise SpecError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB; not a spec file")
    try:
        # A leading byte-order mark is dropped (not the utf-8-sig codec: one more import at start-up).
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise SpecError(
            f"{path}: not UTF-8 text (byte {err.start}: {data[err.start : err.start + 1]!r})"
        ) from None


def load(text: str, origin: str, literal_maps: Collection[tuple[str, ...]] = LITERAL_MAPS) -> Any:
    """The document in `text` as plain Python data; every problem is a one-line SpecError."""
    import yaml

    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        return None if node is None else _Builder(loader, origin, literal_maps).build(node, ())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(f"{origin}:{where} invalid YAML: {problem}") from None
    except RecursionError:
        raise SpecError(f"{origin}: nested too deeply (more than {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


class _Builder:
    """Nodes -> dicts, lists and scalars, counting what aliases expand to."""

    def __init__(self, loader: Any, origin: str, literal_maps: Collection[tuple[str, ...]]) -> None:
        self.loader = loader
        self.origin = origin
        self.literal_maps = literal_maps
        self.nodes = 0
        self.chars = 0

    def fail(self, path: tuple[str, ...], problem: str) -> SpecError:
        where = f" {'.'.join(path)}:" if path else ""
        return SpecError(f"{self.origin}:{where} {problem}")

    def build(self, node: Any, path: tuple[str, ...]) -> Any:
        import yaml

        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.fail(path, f"the document expands to more than {MAX_NODES} values (aliases?)")
        if len(path) > MAX_DEPTH:
            raise self.fail(
                path[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep (a recursive alias?)"
            )
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, str(n))) for n, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        raise self.fail(path, f"unsupported YAML node {type(node).__name__}")

    def scalar(self, node: Any, path: tuple[str, ...]) -> Any:
        self.chars += len(node.value)
        if self.chars > MAX_CHARS:
            raise self.fail(path, f"the document expands to more than {MAX_CHARS >> 20} MiB of text")
        if path[:-1] in self.literal_maps and node.tag != _NULL:
            return node.value
        if node.tag in _TEXT:
            return node.value
        if node.tag in _TYPED:
            return self.loader.construct_object(node)
        raise self.fail(path, f"unsupported YAML tag {node.tag}")

    def mapping(self, node: Any, path: tuple[str, ...]) -> dict[Any, Any]:
        import yaml

        merged: dict[Any, Any] = {}
        explicit: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    data = self.build(source, path)
                    if not isinstance(data, dict):
                        raise self.fail(path, "a merge key (<<) must name a mapping")
                    merged.update({k: v for k, v in data.items() if k not in merged})
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(path, "a key must be a plain value, not a list or mapping")
            # Keys are names as written: `on:` or `0755:` is a key spelled so, not True or 493.
            key = key_node.value
            if key in explicit:
                raise self.fail(path, f"duplicate key {key!r}")
            explicit[key] = self.build(value_node, (*path, str(key)))
        return {**merged, **explicit}


# Fields whose text never reaches the batch script (only spec.json, JSON-encoded), so they may hold
# any character; everything else is refused control characters before its own checks run.
FREE_TEXT = frozenset({("description",), ("train", "options")})
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def check_values(data: Any, path: tuple[str, ...], origin: str) -> None:
    """Refuse non-finite numbers anywhere and control characters in whatever reaches the script."""
    free = any(path[: len(p)] == p for p in FREE_TEXT)

    def fail(problem: str) -> SpecError:
        return SpecError(f"{origin}: {'.'.join(path) or '(top level)'}: {problem}")

    if isinstance(data, float) and not math.isfinite(data):
        raise fail(f"{data} is not a finite number")
    if (
        isinstance(data, str)
        and not free
        and (_CONTROL.search(data) or ("\t" in data and path[:1] != ("setup",)))
    ):
        raise fail(f"{data!r} holds a control character (newline, tab, ...); give one line of plain text")
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(key, str) and not free and (_CONTROL.search(key) or "\t" in key):
                raise fail(f"key {key!r} holds a control character")
            check_values(value, (*path, str(key)), origin)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            check_values(value, (*path, str(index)), origin)
