"""A Keras 3 model as the torch module ``Model`` trains: ``KerasModule``, and the backend check.

A Keras 3 model on torch is a ``torch.nn.Module`` a strategy cannot take as it is: its ``state_dict`` lists every weight
twice, it infers unless called with ``training=True``, and moving statistics are parameters, which DDP never syncs.
``KerasModule`` is the view a strategy sees: each weight once under its Keras path, trainable and frozen weights as
parameters, moving statistics as buffers; seed-generator states stay Keras's, as ``model.weights`` leaves them out. This
module never imports Keras (``import stratagem`` sets ``KERAS_BACKEND=torch`` if Keras is not imported yet).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from typing import Any

import torch
from torch import nn
from typing_extensions import override

from stratagem._torch_internals import put_buffer, registered_buffer
from stratagem.errors import ConfigurationError
from stratagem.models.keras_internals import all_layers, install_channels_last_layout, keras_device, own_variables

BACKEND_ENV = "KERAS_BACKEND"


def imported_keras() -> Any | None:
    """The ``keras`` module if the program imported it (Keras objects cannot exist otherwise), else None."""
    return sys.modules.get("keras")


def is_keras_layer(value: Any) -> bool:
    """Whether ``value`` is a Keras layer or model (whatever Keras's backend)."""
    keras = imported_keras()
    return keras is not None and isinstance(value, keras.Layer)


def check_torch_backend(keras: Any, what: str) -> None:
    """Raises ``ConfigurationError`` unless Keras runs on the torch backend."""
    backend = keras.backend.backend()
    if backend == "torch":
        return
    # NOTE: Keras picks its backend once, when it is first imported; it cannot change afterwards.
    raise ConfigurationError(
        "stratagem trains Keras 3 models on Keras's torch backend (a Keras model is then a torch.nn.Module), but Keras "
        f"was imported with the {backend!r} backend, so {what} cannot train here. Keras reads {BACKEND_ENV} once, when "
        f"first imported: set {BACKEND_ENV}=torch in the environment, or `import stratagem` before `import keras` "
        f"(stratagem sets it then). Received: keras.backend.backend()={backend!r}, "
        f"{BACKEND_ENV}={os.environ.get(BACKEND_ENV)!r}")


class KerasModule(nn.Module):
    """A built Keras 3 model (torch backend) as a torch module, each weight once.

    ``forward`` passes ``training`` from torch's mode, so Dropout and BatchNormalization train under ``fit`` only.
    Parameters and buffers are the Keras variables' own tensors: training them trains ``keras_model``.

    Args:
        keras_model: A built Keras model or layer (its weights exist).

    Raises:
        ConfigurationError: If Keras is not on the torch backend.
        ValueError: If the model has no weights yet (not built).
    """

    keras_model: Any  # set with object.__setattr__: the Keras model is no torch submodule

    def __init__(self, keras_model: Any) -> None:
        super().__init__()
        keras = imported_keras()
        check_torch_backend(keras, f"{type(keras_model).__name__} {keras_model.name!r}")
        install_channels_last_layout()  # channels-last Conv/Pooling without layout copies
        if not keras_model.built or not keras_model.weights:
            raise ValueError("This Keras model has no weights yet: it builds them on its first call (a subclassed "
                             "model, or a Sequential without keras.Input), and a strategy needs them before training "
                             "to keep replicas in sync. Create them before wrapping: call it once on a batch "
                             "(`keras_model(x[:1])`), or start a Sequential with keras.Input(shape). Received: "
                             f"{keras_model.name!r} (built={keras_model.built}, {len(keras_model.weights)} weights)")
        # NOTE: kept out of torch's registry (object.__setattr__): registered, the Keras model's own
        # duplicate parameters would appear next to the ones below.
        object.__setattr__(self, "keras_model", keras_model)
        born_non_trainable = {id(v) for layer in all_layers(keras_model) for v in own_variables(layer)[1]}
        # (holder module, attribute name, variable) of each buffer, for _apply.
        self._buffer_variables: list[tuple[nn.Module, str, Any]] = []
        # (holder module, attribute name, variable, its tensor) of each parameter, for forward.
        self._parameter_variables: list[tuple[nn.Module, str, Any, nn.Parameter]] = []
        owners = _owners(self, keras_model)
        for variable in keras_model.weights:
            tensor = variable.value
            if not isinstance(tensor, nn.Parameter):
                raise TypeError(f"Keras variable {variable.path!r} holds no torch Parameter. Received: {type(tensor)}")
            holder = owners[id(variable)]
            name = _free_name(holder, variable.name)
            if id(variable) in born_non_trainable:
                # Moving statistics: synced like torch's BatchNorm buffers (DDP broadcasts them from the
                # chief before each forward; parameter-server workers keep their own).
                holder.register_buffer(name, tensor)
                self._buffer_variables.append((holder, name, variable))
            else:
                holder.register_parameter(name, tensor)  # frozen layers: requires_grad=False, as Keras sets
                self._parameter_variables.append((holder, name, variable, tensor))

    def forward(self, inputs: Any) -> Any:
        with keras_device(self.device):
            # A wrapper that registers other tensors in place of the variables' own (FSDP's gathered
            # parameters under ShardedDataParallelStrategy) is only obeyed if Keras reads those: Keras reads
            # its variables, so the call maps each swapped variable to the registered tensor.
            swapped = [(variable, current) for holder, name, variable, own in self._parameter_variables
                       if (current := getattr(holder, name)) is not own]
            if not swapped:
                return self.keras_model(inputs, training=self.training)
            keras = imported_keras()
            assert keras is not None  # a KerasModule exists, so Keras is imported
            with keras.StatelessScope(state_mapping=swapped) as scope:
                outputs = self.keras_model(inputs, training=self.training)
            for _, _, variable in self._buffer_variables:  # moving statistics the call updated, kept
                updated = scope.get_current_value(variable)
                if updated is not None:
                    variable.assign(updated)
            return outputs

    @property
    def device(self) -> torch.device:
        """Where this module's weights are: the device its strategy moved it to."""
        return next(itertools.chain(self.parameters(), self.buffers())).device

    @override
    def _apply(self, fn: Any, recurse: bool = True) -> KerasModule:
        super()._apply(fn, recurse)
        # torch moves a buffer by replacing it with a new tensor (parameters are moved in place), but Keras
        # reads its variable's own tensor: put the moved values into that tensor and keep it registered.
        for holder, name, variable in self._buffer_variables:
            tensor = variable.value
            moved = registered_buffer(holder, name)
            if moved is not tensor:
                tensor.data = moved
                put_buffer(holder, name, tensor)
        return self

    @override
    def extra_repr(self) -> str:
        return f"keras_model={self.keras_model.name!r}"


def _owners(root: nn.Module, keras_model: Any) -> dict[int, nn.Module]:
    """For each variable (by id), a torch module for its layer, added to ``root`` under a name builds agree on.

    Keras numbers auto-named layers process-wide, so its paths differ between two builds and a checkpoint would not
    load; as Keras's weights files, each layer is named by class and place among its class (``dense_1.bias``).
    """
    owners: dict[int, nn.Module] = {}
    counts: dict[str, int] = {}
    for layer in all_layers(keras_model):
        # Keras's snake case of a class name: Conv2D -> conv2d, BatchNormalization -> batch_normalization.
        kind = re.sub(r"([a-z])([A-Z])", r"\1_\2", re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", type(layer).__name__)).lower()
        number = counts.get(kind, 0)
        counts[kind] = number + 1
        own = [variable for variables in own_variables(layer) for variable in variables]
        if not own:
            continue
        holder = nn.Module()
        root.add_module(_free_name(root, kind if number == 0 else f"{kind}_{number}"), holder)
        for variable in own:
            owners.setdefault(id(variable), holder)
    return owners


def _free_name(module: nn.Module, name: str) -> str:
    """``name`` as an attribute of ``module`` that is not taken (torch names hold no dots)."""
    base = re.sub(r"\W", "_", name)
    candidate, repeat = base, 1
    while hasattr(module, candidate):
        candidate, repeat = f"{base}_{repeat}", repeat + 1
    return candidate
