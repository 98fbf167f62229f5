"""``Model``: a ``torch.nn.Module`` with Keras' ``compile``/``fit``/``evaluate``/``predict``.

The model binds to the strategy in force where it is built (or compiled),
places the module on that strategy's device and lets the strategy wrap it
(DDP for the all-reduce strategies). ``train_step``/``test_step``/
``predict_step`` can be overridden as in Keras.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from stratagem import optimizers as optimizers_lib
from stratagem._nest import map_structure
from stratagem.callbacks import Callback, CallbackList, History, ProgbarLogger
from stratagem.callbacks.backup_and_restore import BackupAndRestore
from stratagem.distribute import context
from stratagem.distribute.strategy import Strategy
from stratagem.data.distributed import shared_seed
from stratagem.models import fit_loop
from stratagem.models.compile_utils import CompiledLoss, CompiledMetrics
from stratagem.models.data_adapter import make_adapter, unpack


class Model:
    """Keras' training API around a torch module.

    Args:
        module: The network; its ``forward`` takes a batch's ``x``.
        name: A name for ``summary``.

    Example:
        >>> strategy = stratagem.distribute.MirroredStrategy(num_replicas=2)  # doctest: +SKIP
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = stratagem.Model(nn.Sequential(nn.Flatten(), nn.Linear(784, 10)))
        ...     model.compile(optimizer="adam",
        ...                   loss=stratagem.losses.SparseCategoricalCrossentropy(from_logits=True),
        ...                   metrics=["accuracy"])
        >>> model.fit(x_train, y_train, batch_size=64, epochs=3)  # doctest: +SKIP
    """

    def __init__(self, module: nn.Module, *, name: str | None = None) -> None:
        if not isinstance(module, nn.Module):
            raise TypeError(f"Model wraps a torch.nn.Module. Received: module of type {type(module).__name__}")
        self.module = module
        self.name = name or type(module).__name__
        self._strategy = context.get_strategy()
        self._train_module: nn.Module | None = None
        self.optimizer: optimizers_lib.Optimizer | None = None
        self.compiled_loss: CompiledLoss | None = None
        self.compiled_metrics: CompiledMetrics | None = None
        self.stop_training = False
        self.history: History | None = None
        self._global_batch_size = 0
        self.input_wait_fraction = 0.0  # share of the last epoch spent waiting for input (see fit_loop)
        self._input_spec: Any = None  # shapes/dtypes of the first x seen; save() exports with them
        self._callbacks: list[Callback] = []

    @property
    def distribute_strategy(self) -> Strategy:
        """The strategy this model trains with."""
        return self._strategy

    @property
    def metrics(self) -> list[Any]:
        return self.compiled_metrics.all if self.compiled_metrics else []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1:
            self._record_input_spec(args[0])
        return self.module(*args, **kwargs)

    # ---- compile ---------------------------------------------------------------
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Sequence[Any] | None = None) -> None:
        """Sets the optimizer, loss and metrics, and places the module for training.

        Args:
            optimizer: A Keras name (``"sgd"``, ``"adam"``, ``"adamw"``,
                ``"rmsprop"``, ``"adagrad"``), a ``stratagem.optimizers``
                object, or a ``torch.optim.Optimizer`` over the module's parameters.
            loss: A Keras name (``"sparse_categorical_crossentropy"``, ``"mse"``,
                ...), a ``stratagem.losses.Loss``, or ``fn(y_true, y_pred)``
                returning one loss per example.
            metrics: Keras names (``"accuracy"``, ``"mae"``, ...) or ``Metric``s.
        """
        if context.has_strategy():
            self._strategy = context.get_strategy()
        self.compiled_loss = CompiledLoss(loss) if loss is not None else None
        self.compiled_metrics = CompiledMetrics(list(metrics or []), loss_name=self.compiled_loss.name if self.compiled_loss else None)
        self._train_module = self._strategy.distribute_module(self.module)
        self.optimizer = optimizers_lib.get(optimizer)
        self.optimizer.build(self.module.parameters(), self._strategy.device)

    # ---- steps (override as in Keras) --------------------------------------------
    def train_step(self, data: Any) -> None:
        """One optimisation step on this replica's share of a global batch."""
        x, y, sample_weight = unpack(data)
        assert self.optimizer is not None and self._train_module is not None
        x, y, sample_weight = self._to_device(x), self._to_device(y), self._to_device(sample_weight)
        self._record_input_spec(x)
        self.optimizer.zero_grad()
        y_pred = self._train_module(x)
        loss, per_example = self.compute_loss(x, y, y_pred, sample_weight)
        loss.backward()  # DDP sums gradients across replicas during backward
        self._strategy._optimizer_step(self.optimizer._built())
        self._require_compiled().update(y, y_pred, sample_weight, per_example)

    def test_step(self, data: Any) -> None:
        """Updates the loss and metrics on one batch, without training."""
        x, y, sample_weight = (self._to_device(v) for v in unpack(data))
        self._record_input_spec(x)
        y_pred = self.module(x)
        per_example = self.compiled_loss.per_example(y, y_pred) if self.compiled_loss is not None and y is not None else None
        self._require_compiled().update(y, y_pred, sample_weight, per_example)

    def predict_step(self, data: Any) -> Any:
        """Returns the module's outputs on one batch."""
        x, _, _ = unpack(data)
        self._record_input_spec(x)
        return self.module(self._to_device(x))

    def compute_loss(self, x: Any, y: Any, y_pred: torch.Tensor, sample_weight: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(loss to back-propagate, per-example losses)``; the former is scaled by the global batch."""
        if self.compiled_loss is None:
            raise RuntimeError("No loss: pass loss= to compile(), or override train_step.")
        per_example = self.compiled_loss.per_example(y, y_pred)
        return CompiledLoss.scale(per_example, sample_weight, self._global_batch_size or per_example.shape[0]), per_example

    # ---- fit / evaluate / predict -----------------------------------------------
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1, verbose: int | str = "auto",
            callbacks: Sequence[Callback] | None = None, validation_data: Any = None, shuffle: bool = True,
            sample_weight: Any = None, initial_epoch: int = 0, steps_per_epoch: int | None = None,
            validation_steps: int | None = None, validation_batch_size: int | None = None, validation_freq: int = 1) -> History:
        """Trains for ``epochs`` epochs; ``batch_size`` is the GLOBAL batch (all replicas).

        Accepts numpy arrays or tensors (``x``, ``y``, ``sample_weight``), or an
        iterable of ``(x, y)`` / ``(x, y, sample_weight)`` global batches, or a
        distributed dataset. Returns a ``History``.

        Raises:
            ConfigurationError: If ``batch_size`` does not divide by the replicas.
        """
        self._require_compiled()
        if self._strategy._schedules_steps:
            from stratagem.models import coordinated_fit

            return coordinated_fit.fit(
                self, x, y, batch_size=batch_size, epochs=epochs, verbose=verbose, callbacks=callbacks,
                validation_data=validation_data, shuffle=shuffle, sample_weight=sample_weight,
                initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                validation_batch_size=validation_batch_size, validation_freq=validation_freq)
        seed = shared_seed(self._strategy) if shuffle else 0
        train = make_adapter(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed, strategy=self._strategy)
        validation = None
        if validation_data is not None:
            vx, vy, vw = unpack(validation_data) if isinstance(validation_data, tuple) else (validation_data, None, None)
            validation = make_adapter(vx, vy, vw, batch_size=validation_batch_size or batch_size if vy is not None else None,
                                      shuffle=False, seed=0, strategy=self._strategy)
        steps = steps_per_epoch or train.steps
        history = History()
        callback_list = self._callback_list(callbacks, history, verbose, epochs=epochs, steps=steps,
                                            batch_size=getattr(train, "batch_size", None),
                                            samples=getattr(train, "num_samples", None))
        return fit_loop.fit(self, train, epochs=epochs, initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch,
                            callbacks=callback_list, history=history, validation=validation,
                            validation_steps=validation_steps, validation_freq=validation_freq)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None, verbose: int | str = "auto",
                 sample_weight: Any = None, steps: int | None = None, callbacks: Sequence[Callback] | None = None,
                 return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """Returns the loss (and metrics) over the data; each example counts exactly once."""
        self._require_compiled()
        with self._strategy._inline_scope():
            data = make_adapter(x, y, sample_weight, batch_size=batch_size, shuffle=False, seed=0, strategy=self._strategy)
            callback_list = CallbackList(callbacks or [], model=self, params={"steps": steps or data.steps})
            logs = fit_loop.evaluate(self, data, steps=steps, callbacks=callback_list)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    def predict(self, x: Any, batch_size: int | None = None, verbose: int | str = "auto", steps: int | None = None,
                callbacks: Sequence[Callback] | None = None) -> Any:
        """Returns the outputs for every input, in input order, as numpy arrays (on every replica)."""
        with self._strategy._inline_scope():
            data = make_adapter(x, None, None, batch_size=batch_size, shuffle=False, seed=0, strategy=self._strategy)
            callback_list = CallbackList(callbacks or [], model=self, params={"steps": steps or data.steps})
            return fit_loop.predict(self, data, steps=steps, callbacks=callback_list)

    # ---- metrics and weights ------------------------------------------------------
    def reset_metrics(self) -> None:
        if self.compiled_metrics is not None:
            self.compiled_metrics.reset()

    def get_metrics_result(self) -> dict[str, float]:
        """Loss and metrics over every replica's examples so far (a collective)."""
        return self._require_compiled().results(self._strategy)

    def get_weights(self) -> list[np.ndarray]:
        """The module's state (parameters and buffers) as numpy arrays."""
        return [t.detach().cpu().numpy().copy() for t in self.module.state_dict().values()]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        state = self.module.state_dict()
        if len(weights) != len(state):
            raise ValueError(f"set_weights expects {len(state)} arrays. Received: {len(weights)}")
        self.module.load_state_dict({k: torch.as_tensor(w) for k, w in zip(state, weights)})

    def save_weights(self, filepath: str) -> None:
        """Writes the module's parameters and buffers (``.safetensors``, or torch format otherwise).

        Only the chief writes, but every replica may call it. The write is atomic.
        """
        if not self._strategy.is_chief:
            return
        from stratagem.checkpoint.io import save_state

        save_state(filepath, dict(self.module.state_dict()))

    def load_weights(self, filepath: str) -> None:
        """Loads weights saved by ``save_weights`` (never runs code from the file).

        Raises:
            CheckpointError: If the file is unreadable, unsafe, or does not fit the module.
        """
        from stratagem.checkpoint.io import load_state
        from stratagem.errors import CheckpointError

        state = load_state(filepath)
        try:
            self.module.load_state_dict(state)
        except RuntimeError as err:
            raise CheckpointError(
                f"The weights in {filepath!r} do not fit this model (different layers or shapes). "
                f"Received: {str(err)[:300]}"
            ) from err

    def save(self, filepath: str, *, input_example: Any = None) -> None:
        """Saves the model as a folder that loads without its Python class (``keras.Model.save``).

        Writes ``weights.safetensors``, ``model.pt2`` (``torch.export``) and ``metadata.json``,
        atomically. Only the chief writes, but every replica may call it. Input shapes come
        from the first batch the model saw, or from ``input_example``.

        Example:
            >>> model.save("saved/mnist")  # doctest: +SKIP
            >>> stratagem.models.load_model("saved/mnist").predict(x_test)  # doctest: +SKIP
        """
        from stratagem.models.saving import save_model

        save_model(self, filepath, input_example=input_example)

    def count_params(self) -> int:
        return sum(p.numel() for p in self.module.parameters())

    def summary(self, print_fn: Any = None) -> None:
        """Prints each top-level layer with its output parameters (chief only)."""
        if not self._strategy.is_chief:
            return
        emit = print_fn or (lambda line: print(line, file=sys.stdout))
        emit(f'Model: "{self.name}"')
        emit(f"{'Layer':<40}{'Params':>14}")
        emit("=" * 54)
        for name, child in self.module.named_children():
            emit(f"{name + ' (' + type(child).__name__ + ')':<40}{sum(p.numel() for p in child.parameters()):>14,}")
        trainable = sum(p.numel() for p in self.module.parameters() if p.requires_grad)
        emit("=" * 54)
        emit(f"Total params: {self.count_params():,}  Trainable params: {trainable:,}")

    # ---- internals ----------------------------------------------------------------
    def _require_compiled(self) -> CompiledMetrics:
        if self.compiled_metrics is None:
            raise RuntimeError("You must call compile() before fit(), evaluate() or train_step().")
        return self.compiled_metrics

    def _record_input_spec(self, x: Any) -> None:
        if self._input_spec is None:  # only until the first batch of tensors is seen
            from stratagem.models.saving import input_spec_of

            self._input_spec = input_spec_of(x)

    def _to_device(self, value: Any) -> Any:
        if value is None:
            return None
        device = self._strategy.device
        return map_structure(lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t, value)

    def _callback_list(self, callbacks: Sequence[Callback] | None, history: History, verbose: int | str, **params: Any) -> CallbackList:
        verbose = 1 if verbose == "auto" else int(verbose)
        user = list(callbacks or [])
        # BackupAndRestore goes last: it restores after the others reset themselves in
        # on_train_begin, and backs up after they updated themselves in on_epoch_end.
        backups = [c for c in user if isinstance(c, BackupAndRestore)]
        # Keras 3's order: user callbacks, then History (it sees what they add, such as
        # learning_rate), then the progress bar.
        items: list[Callback] = [*(c for c in user if c not in backups), history]
        if verbose:
            items.append(ProgbarLogger(verbose=verbose))
        items += backups
        self._callbacks = items
        return CallbackList(items, model=self, params={**params, "verbose": verbose})

