"""Imported first by the warm server (``warm_processes.PRELOAD``): it asks NVML, not CUDA, whether there is a GPU.

Keras's import calls ``torch.cuda.is_available()``. Answered by CUDA's runtime, that starts the driver, after which
no fork of the server can use CUDA ("Cannot re-initialize CUDA in forked subprocess"); NVML answers without starting
it (``PYTORCH_NVML_BASED_CUDA_CHECK``, torch's remedy for forked workers). Set in the server only: each worker's
environment is the test process's.
"""

import os

os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
