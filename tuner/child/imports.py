"""Child side: run a callback right after a module is imported (the post-import hook).

The patches must be in place before the script's first pipeline or model line runs, yet
nothing may import TensorFlow or Keras before the script does: `_PostImportHook` (a
``sys.meta_path`` finder) wraps the named module's loader so a callback runs as soon as
the module has executed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Runs a callback right after a named module has finished importing."""

    _instance: _PostImportHook | None = None

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    @classmethod
    def when_imported(cls, name: str, callback: Callable[[ModuleType], None]) -> None:
        """`callback` now if `name` is imported already (a warm spare imported it before
        the script ran: `trial.spare`), else right after it is."""
        if name in sys.modules:
            callback(sys.modules[name])
        else:
            cls.register(name, callback)

    @classmethod
    def register(cls, name: str, callback: Callable[[ModuleType], None]) -> None:
        if cls._instance is None:
            cls._instance = cls()
            sys.meta_path.insert(0, cls._instance)
        cls._instance.callbacks.setdefault(name, []).append(callback)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        # `importlib.util.find_spec` (TensorFlow probes for Keras that way) also lands
        # here without importing: callbacks are only consumed when the module executes.
        if not self.callbacks.get(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _CallbackLoader(spec.loader, self, fullname)
                return spec
        return None


class _CallbackLoader(importlib.abc.Loader):
    def __init__(self, inner: Any, hook: _PostImportHook, name: str) -> None:
        self._inner = inner
        self._hook = hook
        self._name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        result: ModuleType | None = self._inner.create_module(spec)
        return result

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._inner
        if module.__spec__ is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        for callback in self._hook.callbacks.pop(self._name, []):
            callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
