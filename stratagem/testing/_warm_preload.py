"""Imported by the warm server (``warm_processes.PRELOAD``): everything ``stratagem``'s public names import.

``stratagem`` and ``stratagem.distribute`` import their public names on first
use; a worker forked from a server that had only run ``import stratagem``
would import the strategies, the Model and the estimator again itself.
"""

import stratagem
import stratagem.distribute

for _package in (stratagem, stratagem.distribute):
    for _name in _package.__all__:
        getattr(_package, _name)
