"""Kernels: how the server reaches a kernel and its agent, wherever the kernel runs.

``bridge`` (``KernelBridge``: start, shut down, run the agent, on jupyter_server's own kernel
manager), ``gateway`` and ``gateway_channels`` (the same for kernels on a Jupyter Enterprise
Gateway, with per-kernel keys), ``spares`` (warm kernels started ahead of a resume),
``replies`` (what the server accepts of the agent's restore reports and rebuild plans).

Imports ``config``, ``state`` and ``capacity`` (GPU probes of remote kernels).
"""
