"""Datasets from Keras's own cache: what ``keras.datasets.<name>.load_data()`` reads, under the same names.

Keras's cache is ``$KERAS_HOME/datasets`` (``~/.keras/datasets``, or ``/tmp/.keras`` if home is not writable). A
missing file is downloaded from Keras's origin (with a timeout, Keras's SHA-256 checked, renamed into place whole);
offline, the error names the file to place. Nothing read here runs code: ``.npz`` files load without pickle.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path

import numpy as np

from stratagem.datasets.mnist import Splits, load_idx_splits

__all__ = ["Splits", "cached_file", "keras_home", "load_fashion_mnist", "load_mnist"]

ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"  # Keras 3's origin for both datasets
DOWNLOAD_TIMEOUT_S = 60.0
_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"  # the hash Keras checks
_FASHION_FILES = ("train-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
                  "t10k-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz")


def keras_home() -> Path:
    """Keras's base folder, by Keras's rule: ``$KERAS_HOME``, else ``~/.keras`` (``/tmp/.keras`` if ``~`` is read-only)."""
    if "KERAS_HOME" in os.environ:
        return Path(os.environ["KERAS_HOME"]).expanduser()
    home = Path("~").expanduser()
    return (home if os.access(home, os.W_OK) else Path("/tmp")) / ".keras"


def cached_file(fname: str, *, subdir: str = "datasets", sha256: str | None = None) -> Path:
    """The path of ``fname`` in Keras's cache, downloaded first if missing (else FileNotFoundError naming where)."""
    target = keras_home() / subdir / fname
    if target.is_file():
        return target
    url = ORIGIN + Path(fname).name
    try:
        _download(url, target, sha256=sha256)
    except OSError as err:  # URLError, timeouts and refused connections are OSErrors
        raise FileNotFoundError(
            f"{fname} is not in Keras's dataset cache and could not be downloaded ({type(err).__name__}: {err}). Place "
            f"the file Keras downloads ({url}) at {target} (set KERAS_HOME to use another cache folder), or train on "
            "the bundled digits with no download: `(x_train, y_train), (x_test, y_test) = "
            f"stratagem.datasets.digits.load_data()`. Received: KERAS_HOME={os.environ.get('KERAS_HOME')!r}") from err
    return target


def load_mnist(path: str = "mnist.npz") -> Splits:
    """``keras.datasets.mnist.load_data(path)``: uint8 images (N, 28, 28) and uint8 labels, from Keras's cache."""
    file = cached_file(path, sha256=_MNIST_SHA256 if path == "mnist.npz" else None)
    with np.load(file, allow_pickle=False) as arrays:
        return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def load_fashion_mnist() -> Splits:
    """``keras.datasets.fashion_mnist.load_data()``: uint8 images (N, 28, 28) and uint8 labels, from Keras's cache."""
    subdir = os.path.join("datasets", "fashion-mnist")
    for name in _FASHION_FILES:
        cached_file(name, subdir=subdir)  # downloaded first where missing
    (x_train, y_train), (x_test, y_test) = load_idx_splits(keras_home() / subdir, dataset_name="Fashion-MNIST",
                                                           source=ORIGIN)
    return (x_train, y_train.astype(np.uint8)), (x_test, y_test.astype(np.uint8))


def _download(url: str, target: Path, *, sha256: str | None) -> None:
    """Downloads ``url`` to ``target`` through a temporary file renamed into place (never half a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{target.name}.", delete=False) as tmp:
        try:
            with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:  # noqa: S310 (https origin)
                while chunk := response.read(1 << 20):
                    tmp.write(chunk)
                    digest.update(chunk)
            if sha256 is not None and digest.hexdigest() != sha256:
                raise OSError(f"the download's SHA-256 is {digest.hexdigest()}, Keras expects {sha256}")
            tmp.flush()
            os.fsync(tmp.fileno())
        except BaseException:
            os.unlink(tmp.name)
            raise
    os.replace(tmp.name, target)

