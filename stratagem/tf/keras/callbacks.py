"""``tf.keras.callbacks``: Keras's ``Callback`` base, and stratagem's callbacks where files or replicas are involved.

``Callback`` (and ``CallbackList``, ``RemoteMonitor``, ``SwapEMAWeights``) are
Keras 3's: a user's subclass runs in stratagem's fit loop with Keras's semantics
(``self.model`` is the model ``fit`` was called on, epoch logs reduced over every
replica). The others are stratagem's, which do what Keras's do and also what a
strategy needs: only the chief writes (``ModelCheckpoint``, ``TensorBoard``,
``CSVLogger``), every replica stops together (``EarlyStopping``,
``TerminateOnNaN``), and ``BackupAndRestore`` resumes mid-epoch with the data
position and RNG state. Keras's own classes stay at ``keras.callbacks``.
"""

from __future__ import annotations

from keras.callbacks import Callback, CallbackList, RemoteMonitor, SwapEMAWeights

from stratagem.callbacks import (
    BackupAndRestore, CSVLogger, EarlyStopping, History, LambdaCallback, LearningRateScheduler, ModelCheckpoint,
    ProgbarLogger, ReduceLROnPlateau, TensorBoard, TerminateOnNaN,
)
from stratagem.tf._refusal import module_getattr

__all__ = ["BackupAndRestore", "CSVLogger", "Callback", "CallbackList", "EarlyStopping", "History", "LambdaCallback",
           "LearningRateScheduler", "ModelCheckpoint", "ProgbarLogger", "ReduceLROnPlateau", "RemoteMonitor",
           "SwapEMAWeights", "TensorBoard", "TerminateOnNaN"]
__getattr__ = module_getattr("tf.keras.callbacks")
