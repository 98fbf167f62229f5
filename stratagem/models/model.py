"""``Model``: a ``torch.nn.Module`` with Keras' ``compile``/``fit``/``evaluate``/``predict``.

It binds to the strategy in force where it is built (or compiled), which places and wraps the module (DDP for the
all-reduce strategies). ``train_step``/``test_step``/``predict_step`` can be overridden as in Keras.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from stratagem import mixed_precision
from stratagem import optimizers as optimizers_lib
from stratagem._nest import batch_size_of, map_structure
from stratagem.callbacks import Callback, CallbackList, History, ProgbarLogger
from stratagem.callbacks.backup_and_restore import BackupAndRestore
from stratagem.callbacks.keras_callback import KerasCallback, is_keras_callback
from stratagem.data.ops.shuffle import mix_seed
from stratagem.distribute import collectives, context
from stratagem.distribute.capabilities import StrategyOptimizer, SchedulesSteps, ShardsVariables, has
from stratagem.distribute.input_lib import shared_seed
from stratagem.distribute.strategy import Strategy
from stratagem.models import fit_loop, keras_saving
from stratagem.models.compile_utils import CompiledLoss, CompiledMetrics
from stratagem.models.data_adapter import (
    cast_inputs, check_bounded, make_adapter, split_and_weight, unpack,
)
from stratagem.models.fit_arguments import check_fit_arguments
from stratagem.models.fit_state import FitState
from stratagem.models.gradient_step import GradientStep, in_float32
from stratagem.models.keras_compile import from_keras
from stratagem.models.keras_model import KerasModule, is_keras_layer
from stratagem.models.runners import FitInput, make_runner
from stratagem.nn import compute_average_loss


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
        if is_keras_layer(module):  # a Keras 3 model: its torch view, each weight once (keras_model.py)
            keras_module = KerasModule(module)
            module, name = keras_module, name or str(keras_module.keras_model.name)
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
        self.input_wait_fraction = 0.0  # share of the last epoch spent waiting for input (see runners)
        self._input_spec: Any = None  # shapes/dtypes of the first x seen; save() exports with them
        # The optimizer as the strategy steps it (distribute_optimizer).
        self._updater: torch.optim.Optimizer | StrategyOptimizer | None = None
        self._gradient_step: GradientStep | None = None  # autocast, loss scaling, accumulation (compile)
        self._forward: Any = self.module  # what test/predict steps call: torch.compile'd with jit_compile=True
        self.dtype_policy = mixed_precision.global_policy()  # read when built, as Keras layers do
        self._seed = 0  # agreed by every replica at compile; each fit's shuffle seed derives from it
        self._fits = 0
        # The tf.keras model this Model trains for (stratagem.tf.keras), or None: Keras callbacks see it as their
        # model, as the object the user called fit on (keras_training.py sets it).
        self._facade: Any = None

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
    def compile(self, optimizer: Any = "rmsprop", loss: Any = None, metrics: Sequence[Any] | None = None,
                weighted_metrics: Sequence[Any] | None = None, *, steps_per_execution: int = 1,
                jit_compile: bool | str = "auto", auto_scale_loss: bool = True) -> None:
        """Sets the optimizer, loss and metrics, and places the module for training.

        Args:
            optimizer: A Keras name (``"sgd"``, ``"adam"``, ``"adamw"``, ``"rmsprop"``, ``"adagrad"``,
                ``"adadelta"``, ``"adamax"``, ``"nadam"``, ``"lion"``: Keras 3's update rules), a
                ``stratagem.optimizers`` object, or a ``torch.optim.Optimizer`` over the module's parameters
                (torch's rule).
            loss: A Keras name (``"sparse_categorical_crossentropy"``, ``"mse"``,
                ...), a ``stratagem.losses.Loss``, or ``fn(y_true, y_pred)``
                returning one loss per example.
            metrics: Keras names (``"accuracy"``, ``"mae"``, ``"auc"``, ...) or ``Metric``s, computed without sample
                weights. ``"accuracy"`` is binary, sparse categorical or categorical by the shapes of the labels and
                outputs, as in Keras 3.
            weighted_metrics: Metrics computed with the sample weights; a name also in ``metrics`` logs as
                ``weighted_<name>``.
            steps_per_execution: Only 1, as Keras 3's torch backend accepts: each step is one call (larger values
                raise).
            jit_compile: As Keras 3's torch backend: ``"auto"`` and ``False`` run eagerly; ``True`` runs the forward
                passes through ``torch.compile`` (the first steps are slow while it compiles).
            auto_scale_loss: Under the ``"mixed_float16"`` policy, wrap the optimizer in a ``LossScaleOptimizer``
                (Keras 3's default).
        """
        if context.has_strategy():
            self._strategy = context.get_strategy()
        optimizer, loss, metrics, weighted_metrics = from_keras(optimizer, loss, metrics, weighted_metrics)
        self.compiled_loss = CompiledLoss(loss) if loss is not None else None
        self.compiled_metrics = CompiledMetrics(list(metrics or []), list(weighted_metrics or []))
        self._train_module = self._strategy.distribute_module(self._step_module())
        if steps_per_execution != 1:
            raise ValueError(
                "`steps_per_execution` must be 1 with the PyTorch backend, as in Keras 3 (each step is one Python call "
                f"here; nothing is gained by grouping them). Received: steps_per_execution={steps_per_execution!r}")
        if jit_compile not in ("auto", True, False):
            raise ValueError(f"jit_compile must be 'auto', True or False. Received: jit_compile={jit_compile!r}")
        self.optimizer = optimizers_lib.get(optimizer)
        if (auto_scale_loss and self.dtype_policy.name == "mixed_float16"
                and not isinstance(self.optimizer, mixed_precision.LossScaleOptimizer)):
            self.optimizer = mixed_precision.LossScaleOptimizer(self.optimizer)
        # As Keras builds its optimizer over trainable_variables: frozen weights get no optimizer state, and no
        # strategy's step (CentralStorage fills missing gradients with zeros) can decay them.
        trainable = (p for p in self.module.parameters() if p.requires_grad)
        self._updater = self._strategy.distribute_optimizer(self.optimizer.build(trainable, self._strategy.device))
        self._gradient_step = GradientStep(self._strategy, self.optimizer, self._updater, self._train_module,
                                           self.dtype_policy)
        self._forward = self.module
        if jit_compile is True:  # Keras 3's torch backend: torch.compile; "auto" means eager there
            self._train_module = cast(nn.Module, torch.compile(self._train_module))
            self._forward = torch.compile(self.module)
        # NOTE: one small collective here rather than one per fit: every fit's shuffle seed derives from this one,
        # which every replica holds. Drawn from torch's RNG, so torch.manual_seed before compile makes the shuffles
        # reproducible.
        self._seed = shared_seed(self._strategy)

    # ---- steps (override as in Keras) --------------------------------------------
    def train_step(self, data: Any, *, global_batch_size: int | None = None) -> None:
        """One optimisation step on this replica's share of a global batch.

        ``fit`` passes ``global_batch_size``, the step's examples over every replica, to an override that declares
        the argument (Keras' ``train_step(self, data)`` gets ``data`` alone, and its loss divides by this replica's
        rows times ``num_replicas_in_sync``, TF's rule).
        """
        x, y, sample_weight = unpack(data)
        assert self.optimizer is not None and self._train_module is not None
        x, y, sample_weight = self._to_device(x), self._to_device(y), self._to_device(sample_weight)
        x = cast_inputs(x, self.module)  # integer inputs as floats, as tf.keras casts to its Input's dtype
        self._record_input_spec(x)
        step = self._gradient_step
        assert step is not None
        with step.forward():  # autocast under a mixed policy; DDP's no_sync between accumulated updates
            y_pred = in_float32(self._train_module(x))
        global_batch_size = global_batch_size or self._rows_times_replicas(y_pred)
        loss = self.compute_loss(x, y, y_pred, sample_weight, global_batch_size=global_batch_size)
        step.minimize(loss)  # backward (DDP sums gradients across replicas), then the strategy's update
        # Keras 3 logs the loss it trains on (this replica's share of it, summed on read).
        self._require_compiled().update(y, y_pred, sample_weight, loss, global_batch_size)

    def test_step(self, data: Any, *, global_batch_size: int | None = None) -> None:
        """Updates the loss and metrics on one batch, without training (``global_batch_size`` as in ``train_step``)."""
        x, y, sample_weight = (self._to_device(v) for v in unpack(data))
        x = cast_inputs(x, self.module)  # integer inputs as floats, as tf.keras casts to its Input's dtype
        self._record_input_spec(x)
        with self.dtype_policy.autocast(self._strategy.device):
            y_pred = in_float32(self._forward(x))
        loss = None
        global_batch_size = global_batch_size or self._rows_times_replicas(y_pred)
        # Keras 3 logs what compute_loss returns. Without labels it raises (as fit does): a compiled loss needs y, and
        # metrics alone on y=None would return [] as if the model had been evaluated.
        if self.compiled_loss is not None:
            loss = self.compute_loss(x, y, y_pred, sample_weight, training=False, global_batch_size=global_batch_size)
        self._require_compiled().update(y, y_pred, sample_weight, loss, global_batch_size)

    def predict_step(self, data: Any) -> Any:
        """Returns the module's outputs on one batch."""
        x, _, _ = unpack(data)
        self._record_input_spec(x)
        with self.dtype_policy.autocast(self._strategy.device):
            # float32 out: numpy has no bfloat16, and Keras' guide ends a mixed model in a float32 layer
            return in_float32(self._forward(cast_inputs(self._to_device(x), self.module)))

    def compute_loss(self, x: Any = None, y: Any = None, y_pred: Any = None, sample_weight: Any = None,
                     training: bool = True, *, global_batch_size: int | None = None) -> torch.Tensor:
        """The loss to back-propagate on this replica: ``sum(sample_weight * loss) / global_batch_size``.

        ``global_batch_size`` is every replica's examples of the step: ``fit`` passes what the batch says
        (``train_step``'s argument); without it (``strategy.run(model.train_step, ...)``) it is this replica's rows
        times ``num_replicas_in_sync``. The strategy sums gradients, so N replicas update as one would on the global
        batch.
        """
        if self.compiled_loss is None:
            raise RuntimeError("No loss: pass loss= to compile(), or override train_step.")
        per_example = self.compiled_loss.per_example(y, y_pred)
        # The custom loop's rule (tf.nn.compute_average_loss): gradients are summed across replicas.
        return compute_average_loss(per_example, sample_weight,
                                    global_batch_size or per_example.shape[0] * self._strategy.num_replicas_in_sync)

    def _rows_times_replicas(self, y_pred: Any) -> int:
        return int(batch_size_of(y_pred)) * self._strategy.num_replicas_in_sync

    def _step_module(self) -> nn.Module:
        """The module the strategy wraps for ``train_step`` (DDP): the model's own."""
        return self.module

    # ---- fit / evaluate / predict -----------------------------------------------
    @collectives.call_errors("fit")  # a failed collective inside names this call
    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1, verbose: int | str = "auto",
            callbacks: Sequence[Callback] | None = None, validation_split: float = 0.0, validation_data: Any = None,
            shuffle: bool = True, class_weight: dict[int, float] | None = None, sample_weight: Any = None,
            initial_epoch: int = 0, steps_per_epoch: int | None = None, validation_steps: int | None = None,
            validation_batch_size: int | None = None, validation_freq: int = 1) -> History:
        """Trains for ``epochs`` epochs; ``batch_size`` is the GLOBAL batch (all replicas).

        Accepts numpy arrays or tensors (``x``, ``y``, ``sample_weight``), or an iterable of ``(x, y)`` / ``(x, y,
        sample_weight)`` global batches, or a distributed dataset. Returns a ``History``. As in Keras 3,
        ``validation_split`` sets apart the LAST fraction of the arrays (before shuffling) unless
        ``validation_data`` is given, and ``class_weight`` (``{class: weight}``) gives each training example its
        class's weight as its sample weight.

        Raises:
            ConfigurationError: If ``batch_size`` does not divide by the replicas.
            ValueError: If the data repeats forever without ``steps_per_epoch``, or
                ``validation_split``/``class_weight`` do not fit the input.
        """
        self._require_compiled()
        self._check_in_scope()
        check_fit_arguments(
            x, epochs=epochs, initial_epoch=initial_epoch, verbose=verbose, shuffle=shuffle, callbacks=callbacks,
            batch_size=batch_size, class_weight=class_weight,
            validation={"validation_data": validation_data, "validation_freq": validation_freq,
                        "validation_steps": validation_steps, "validation_batch_size": validation_batch_size})
        x, y, sample_weight, validation_data = split_and_weight(
            x, y, sample_weight, validation_split=validation_split, validation_data=validation_data,
            class_weight=class_weight)
        steps_per_epoch = check_bounded(x, steps=steps_per_epoch, steps_name="steps_per_epoch")  # 0: a pass, as Keras
        if validation_data is not None and not isinstance(validation_data, tuple):
            check_bounded(validation_data, steps=validation_steps, steps_name="validation_steps")
        self._fits += 1
        seed = mix_seed(self._seed, self._fits) if shuffle else 0  # the same on every replica: no collective
        history = History()

        def callback_list_for(state: FitState, params: dict[str, Any]) -> CallbackList:
            return self._callback_list(callbacks, history, verbose, state, epochs=epochs, **params)

        # NOTE: the strategy's capabilities pick how steps run (runners.make_runner): here, or where a coordinator
        # schedules them; fit_loop.fit is the same loop for both.
        runner, state, callback_list = make_runner(
            self, FitInput(x, y, sample_weight, batch_size=batch_size, shuffle=shuffle, seed=seed,
                           steps_per_epoch=steps_per_epoch, epochs=epochs, initial_epoch=initial_epoch),
            callback_list_for)
        validate = None
        if validation_data is not None:
            vx, vy, vw = unpack(validation_data) if isinstance(validation_data, tuple) else (validation_data, None, None)
            val_batch_size = validation_batch_size or batch_size if vy is not None else None

            def validate() -> dict[str, float]:
                logs = self.evaluate(vx, vy, batch_size=val_batch_size, verbose=0, sample_weight=vw,
                                     steps=validation_steps, return_dict=True)
                return {f"val_{key}": value for key, value in logs.items()}  # type: ignore[union-attr]

        return fit_loop.fit(self, runner, state=state, epochs=epochs, callbacks=callback_list, history=history,
                            validate=validate, validation_freq=validation_freq)

    @collectives.call_errors("evaluate")  # a failed collective inside names this call
    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None, verbose: int | str = "auto",
                 sample_weight: Any = None, steps: int | None = None, callbacks: Sequence[Callback] | None = None,
                 return_dict: bool = False) -> float | list[float] | dict[str, float]:
        """Returns the loss (and metrics) over the data; each example counts exactly once."""
        self._require_compiled()
        steps = check_bounded(x, steps=steps, steps_name="steps")  # 0: a pass, as Keras
        data = make_adapter(x, y, sample_weight, batch_size=batch_size, shuffle=False, seed=0, strategy=self._strategy,
                            local=self._runs_locally())
        callback_list = CallbackList(callbacks or [], model=self, params={"steps": steps or data.steps})
        logs = fit_loop.evaluate(self, data, steps=steps, callbacks=callback_list)
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values

    @collectives.call_errors("predict")  # a failed collective inside names this call
    def predict(self, x: Any, batch_size: int | None = None, verbose: int | str = "auto", steps: int | None = None,
                callbacks: Sequence[Callback] | None = None) -> Any:
        """Returns the outputs for every input, in input order, as numpy arrays (on every replica)."""
        steps = check_bounded(x, steps=steps, steps_name="steps")  # 0: a pass, as Keras
        data = make_adapter(x, None, None, batch_size=batch_size, shuffle=False, seed=0, strategy=self._strategy,
                            local=self._runs_locally())
        callback_list = CallbackList(callbacks or [], model=self, params={"steps": steps or data.steps})
        return fit_loop.predict(self, data, steps=steps, callbacks=callback_list)

    # ---- metrics and weights ------------------------------------------------------
    def reset_metrics(self) -> None:
        if self.compiled_metrics is not None:
            self.compiled_metrics.reset()

    def get_metrics_result(self, local: bool = False) -> dict[str, float]:
        """Loss and metrics over every replica's examples so far (a collective), or this replica's with ``local``."""
        return self._require_compiled().results(None if local else self._strategy)

    def training_log_extras(self) -> dict[str, float]:
        """What ``fit`` adds to each epoch's logs beyond the metrics: ``skipped_steps`` under float16 loss scaling.

        The steps skipped since ``compile`` for inf/NaN gradients; the same on every replica (they agree on each
        skip). Not in ``evaluate``'s results, which stay Keras' loss and metrics.
        """
        if isinstance(self.optimizer, mixed_precision.LossScaleOptimizer):
            return {"skipped_steps": float(self.optimizer.skipped_steps)}
        return {}

    def get_weights(self) -> list[np.ndarray]:
        """The module's state (parameters and buffers) as numpy arrays."""
        return [t.detach().cpu().numpy().copy() for t in self._whole_state().values()]

    def set_weights(self, weights: Sequence[np.ndarray]) -> None:
        state = self.module.state_dict()
        if len(weights) != len(state):
            raise ValueError(f"set_weights expects {len(state)} arrays. Received: {len(weights)}")
        self._load_whole_state({k: torch.as_tensor(w) for k, w in zip(state, weights)})

    def save_weights(self, filepath: str, overwrite: bool = True) -> None:
        """Writes the module's parameters and buffers (``.safetensors``, or torch format otherwise).

        Only the chief writes, but every replica may call it (every replica must, when the strategy shards the
        weights: they are gathered first). The write is atomic. A Keras model and a ``.weights.h5`` path: Keras's
        weights file (``keras_saving.py``).
        """
        if self._strategy.is_chief:
            self._runs_locally()  # a checkpoint mid-epoch under ParameterServerStrategy: the servers' values
        keras_model = keras_saving.keras_model_for(self.module, filepath, suffixes=(keras_saving.WEIGHTS_SUFFIX,))
        if keras_model is not None:
            self._check_whole_on_each_replica("save_weights to a Keras file")
            keras_saving.save(keras_model, filepath, weights_only=True, overwrite=overwrite,
                              is_chief=self._strategy.is_chief)
            return
        state = self._whole_state()
        if not self._strategy.is_chief:
            return
        from stratagem.checkpoint.io import save_state

        save_state(filepath, dict(state))

    def load_weights(self, filepath: str, **kwargs: Any) -> None:
        """Loads weights saved by ``save_weights`` (never runs code from the file).

        A Keras model reads Keras's ``.weights.h5``/``.keras``/``.h5`` files too (``kwargs``: Keras's
        ``skip_mismatch``).

        Raises:
            CheckpointError: If the file is unreadable, unsafe, or does not fit the module.
        """
        keras_model = keras_saving.keras_model_for(self.module, filepath, suffixes=keras_saving.LOADABLE_WEIGHTS)
        if keras_model is not None:
            keras_saving.load_weights(keras_model, filepath, **kwargs)
            return
        if kwargs:
            raise ValueError(f"load_weights takes no further arguments for this file. Received: {sorted(kwargs)}")
        from stratagem.checkpoint.io import load_state
        from stratagem.errors import CheckpointError

        state = load_state(filepath)
        try:
            self._load_whole_state(state)
        except RuntimeError as err:
            raise CheckpointError(
                f"The weights in {filepath!r} do not fit this model (different layers or shapes). "
                f"Received: {str(err)[:300]}"
            ) from err

    def _whole_state(self) -> dict[str, torch.Tensor]:
        """The module's state, whole: gathered from every replica's shards when the strategy shards it (a collective)."""
        if has(self._strategy, ShardsVariables):
            return self._strategy.full_state_dict(self.module)
        return self.module.state_dict()

    def _load_whole_state(self, state: dict[str, torch.Tensor]) -> None:
        if has(self._strategy, ShardsVariables):
            self._strategy.load_full_state_dict(self.module, state)
        else:
            self.module.load_state_dict(state)

    def save(self, filepath: str, overwrite: bool = True, *, input_example: Any = None, **kwargs: Any) -> None:
        """Saves the model as a folder that loads without its Python class (``keras.Model.save``).

        Writes ``weights.safetensors``, ``model.pt2`` (``torch.export``) and ``metadata.json``, atomically. Only the
        chief writes, but every replica may call it. Input shapes come from the first batch the model saw, or from
        ``input_example``. A Keras model and a ``.keras``/``.h5`` path: Keras's file, which
        ``keras.models.load_model`` reads.

        Raises:
            ValueError: If given ``save_format`` (Keras 3 refuses it too) or another argument.

        Example:
            >>> model.save("saved/mnist")  # doctest: +SKIP
            >>> stratagem.models.load_model("saved/mnist").predict(x_test)  # doctest: +SKIP
        """
        from stratagem.models.saving import save_model

        save_format = kwargs.pop("save_format", None)
        if save_format:
            raise ValueError(
                "The `save_format` argument is deprecated in Keras 3, and stratagem has one format: Model.save "
                "writes a folder (weights.safetensors, model.pt2 from torch.export, metadata.json) that "
                "stratagem.models.load_model reads. There is no TF SavedModel or HDF5 file. Remove save_format "
                f"(save_weights writes the weights alone). Received: save_format={save_format!r}")
        if kwargs:
            raise ValueError(f"The following argument(s) are not supported: {sorted(kwargs)}. Received: {kwargs!r}")
        self._check_whole_on_each_replica("Model.save")
        if self._strategy.is_chief:
            self._runs_locally()  # a checkpoint mid-epoch under ParameterServerStrategy: the servers' values
        keras_model = keras_saving.keras_model_for(self.module, filepath, suffixes=keras_saving.MODEL_SUFFIXES)
        if keras_model is not None:
            keras_saving.save(keras_model, filepath, weights_only=False, overwrite=overwrite,
                              is_chief=self._strategy.is_chief)
            return
        if not overwrite and os.path.exists(filepath):
            raise FileExistsError(f"{filepath} exists and overwrite=False. Received: filepath={filepath!r}")
        save_model(self, filepath, input_example=input_example)

    def _check_whole_on_each_replica(self, what: str) -> None:
        if has(self._strategy, ShardsVariables) and self._strategy.num_replicas_in_sync > 1:
            raise ValueError(
                f"{what} writes the whole model from one process, but under {type(self._strategy).__name__} each "
                "replica holds only a shard of it. Call model.save_weights(path) on every replica (the chief writes "
                "the gathered weights), then in one process without this strategy load them into the same architecture "
                f"and save that model. Received: num_replicas_in_sync={self._strategy.num_replicas_in_sync}")

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

    def _check_in_scope(self) -> None:
        """Refuses to train a model made outside the scope of this process's multi-replica strategy."""
        distributed = context.distributed_strategy()
        if distributed is None or not context.is_default(self._strategy):
            return
        from stratagem.errors import ConfigurationError

        # NOTE: TF raises (ValueError) when variables made outside a strategy's scope are compiled inside it; made and
        # compiled outside, each replica would train its own model on its own data and act as chief, writing every
        # checkpoint, with nothing said. Neither is wanted.
        raise ConfigurationError(
            f"This model was built and compiled outside strategy.scope() while {type(distributed).__name__} "
            f"({distributed.num_replicas_in_sync} replicas) exists in this process: every replica would train its own "
            "model alone and act as chief. Build and compile it inside `with strategy.scope():`. Received: model "
            f"strategy=default (one replica), num_replicas_in_sync={distributed.num_replicas_in_sync}")

    def _record_input_spec(self, x: Any) -> None:
        if self._input_spec is None:  # only until the first batch of tensors is seen
            from stratagem.models.saving import input_spec_of

            self._input_spec = input_spec_of(x)

    def _to_device(self, value: Any) -> Any:
        device = self._strategy.device
        if value is None or device.type == "cpu":
            return value  # batches are made on the host: nothing to move
        return map_structure(lambda t: t.to(device, non_blocking=True) if isinstance(t, torch.Tensor) else t, value)

    def _runs_locally(self) -> bool:
        """Where steps are scheduled elsewhere, evaluate/predict/saves run here, on the servers' current values."""
        if has(self._strategy, SchedulesSteps):
            self._strategy.pull_all()
            return True
        return False

    def _callback_list(self, callbacks: Sequence[Callback] | None, history: History, verbose: int | str,
                       state: FitState, **params: Any) -> CallbackList:
        verbose = 1 if verbose == "auto" else int(verbose)
        user = [KerasCallback(c) if is_keras_callback(c) else c for c in callbacks or []]  # Keras's semantics
        # BackupAndRestore goes last: it restores after the others reset themselves in on_train_begin, and backs up
        # after they updated themselves in on_epoch_end.
        backups = [c for c in user if isinstance(c, BackupAndRestore)]
        # Keras 3's order: user callbacks, then History (it sees what they add, such as learning_rate), then the
        # progress bar.
        items: list[Callback] = [*(c for c in user if c not in backups), history]
        if verbose:
            items.append(ProgbarLogger(verbose=verbose))
        items += backups
        state.callbacks = items
        return CallbackList(items, model=self, params={**params, "verbose": verbose}, fit_state=state)
