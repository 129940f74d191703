"""The differential test bed: real kernels of Liger-Kernel, flash-linear-attention, FlagGems and Triton's
tutorials, each described once as its library launches it (``spec.Launch``), run through tritonplug on the
CPU against a reference of the op (``test_cpu.py``) and, on a GPU, against Triton's own launcher on torch
tensors (``test_cuda.py``, ``bench/kernel_corpus.py``)."""
