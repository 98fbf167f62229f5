"""``tf.keras.callbacks``: Keras's ``Callback`` base, and stratagem's callbacks where files or replicas are involved.

``Callback`` (and ``CallbackList``, ``RemoteMonitor``, ``SwapEMAWeights``) are Keras 3's, run by stratagem's fit loop
with Keras's semantics (``self.model`` is the model ``fit`` was called on; epoch logs are reduced over every
replica). The others are stratagem's: only the chief writes, every replica stops together, and
``BackupAndRestore`` resumes mid-epoch.
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
