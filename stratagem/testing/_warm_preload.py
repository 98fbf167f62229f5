"""Imported by the warm server (``warm_processes.PRELOAD``, last): stratagem's public names, then a ``gc.freeze()``.

``stratagem`` and ``stratagem.distribute`` import their public names on first
use; a worker forked from a server that had only run ``import stratagem``
would import the strategies, the Model and the estimator again itself.
The freeze moves everything imported so far (torch's, Keras's and
stratagem's module-level objects, which live as long as the process) out of
the collector's reach, as CPython's docs advise before forking: a worker's
full collections then traverse only its own objects.
"""

import gc

import stratagem
import stratagem.distribute

for _package in (stratagem, stratagem.distribute):
    for _name in _package.__all__:
        getattr(_package, _name)
gc.freeze()
