"""torchvision's fake-op registrations, skipped when its C++ ops did not load (the CPU vLLM environment).

Installed by ``scripts/vllm_env.sh`` into that environment only, as ``_guiagent_torchvision_guard.py``
plus a ``.pth`` line that imports it at start-up; the project's own install never has torchvision.

Why: PyPI's torchvision wheels are built against CUDA torch, so on torch's CPU build their ``_C``
extension cannot load (it links ``libtorch_cuda.so``). torchvision handles that itself for everything
but one module: ``torchvision/__init__.py`` imports ``_meta_registrations``, which registers fake
(meta) kernels for ``torchvision::nms`` and the other C++ ops unconditionally, and registering a fake
kernel for an op that was never defined raises ``RuntimeError: operator torchvision::nms does not
exist``; so ``import torchvision`` fails, and with it transformers' Qwen2-VL image processor, which vLLM
imports. (``_autograd_registrations`` beside it already checks ``torchvision.extension._has_ops()``.)

What: a meta-path finder that answers for ``torchvision._meta_registrations`` only, and only when
``torchvision.extension._has_ops()`` is False, with an empty module: the same condition torchvision
applies to its autograd registrations. Nothing else changes: the image transforms (pure torch) work;
a C++ op (``torchvision.ops.nms``) raises torchvision's own "Couldn't load custom C++ ops" error; a
torchvision whose extension loads (a real CPU build) imports untouched.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TARGET = "torchvision._meta_registrations"


class _Skip(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default: an empty module

    def exec_module(self, module: object) -> None:
        module.__doc__ = ("skipped by the CPU vLLM environment's guard: torchvision's C++ ops did not load, "
                          "so there is nothing to register fake kernels for")


class TorchvisionGuard(importlib.abc.MetaPathFinder):
    """Serves an empty ``torchvision._meta_registrations`` when torchvision's C++ ops are absent."""

    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != TARGET:
            return None
        extension = sys.modules.get("torchvision.extension")
        if extension is None or extension._has_ops():
            return None  # the C++ ops loaded (or an unexpected import order): torchvision's own module
        return importlib.machinery.ModuleSpec(fullname, _Skip())


if not any(isinstance(f, TorchvisionGuard) for f in sys.meta_path):
    sys.meta_path.insert(0, TorchvisionGuard())
