"""Keras-style callbacks."""

from stratagem.callbacks.backup_and_restore import BackupAndRestore
from stratagem.callbacks.callback import Callback, StopsTraining
from stratagem.callbacks.callback_list import CallbackList
from stratagem.callbacks.csv_logger import CSVLogger
from stratagem.callbacks.early_stopping import EarlyStopping
from stratagem.callbacks.history import History
from stratagem.callbacks.lambda_callback import LambdaCallback
from stratagem.callbacks.lr_scheduler import LearningRateScheduler, ReduceLROnPlateau
from stratagem.callbacks.model_checkpoint import ModelCheckpoint
from stratagem.callbacks.progbar import ProgbarLogger
from stratagem.callbacks.tensorboard import TensorBoard
from stratagem.callbacks.terminate_on_nan import TerminateOnNaN

__all__ = [
    "BackupAndRestore", "CSVLogger", "Callback", "CallbackList", "EarlyStopping", "History", "LambdaCallback",
    "LearningRateScheduler", "ModelCheckpoint", "ProgbarLogger", "ReduceLROnPlateau", "StopsTraining", "TensorBoard",
    "TerminateOnNaN",
]
