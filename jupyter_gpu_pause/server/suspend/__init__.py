"""Suspend in place: the tier of pause where the CUDA driver copies a kernel's GPU state to host
memory and releases the GPU in about a second, while the checkpoint is written behind it.

``driver`` (the boundary: the driver's process-checkpoint API through ctypes on
``libcuda.so.1``, or nothing where it is missing), ``tier`` (which tier is in force on this
server, and why), ``suspender`` (suspending and restoring a kernel's processes on one worker
thread, and whether the host has the memory to), ``kept`` (suspended kernels kept for a fast
resume after their checkpoint is written).

Imports ``config``, ``state`` and ``capacity`` (a kernel's process tree).
"""
