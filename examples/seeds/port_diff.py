"""How many lines of each seed snippet a user changes to run it on stratagem: the seed's text against the example.

Each example in this folder is the code of one or more snippets of a seed document (/work/shared/seeds, or the
folder given with --seeds) with ``import tensorflow as tf`` replaced by ``import stratagem.tf as tf``. This script
cuts every snippet out of the seed text (a fenced code block, or a notebook cell from its ``In [n]:`` header to its
last code line), diffs the snippets against the example line by line (blank lines ignored, trailing spaces
stripped) and prints one row per example:

- ``changed``: seed lines the example replaces or deletes, split into the import line, the data source (where
  TensorFlow downloads: tfds, Kaggle, pretrained weights), the run-length knob the tests use (``SEED_*``
  variables, one line each) and anything else;
- ``added``: example lines with no seed line (completion of a fragment, the stand-in data writer, comments).

Run: ``python examples/seeds/port_diff.py`` (``--show`` prints each changed line beside the seed's).
Seed 003 has no code (its examples are written from its prose), so it has no row; seed 002 shows only a
``TF_CONFIG`` dict, compared with the example that uses it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SEEDS = "/work/shared/seeds"

# A snippet is ("fence", n): the n-th fenced code block, or (header, occurrence, last_line): the notebook cell
# after the occurrence-th line equal to `header`, up to the first line equal to `last_line` (both stripped).
SNIPPETS: dict[str, tuple[str, list[tuple]]] = {
    "seed000_numpy_input.py": ("000", [("fence", 0), ("fence", 1)]),
    "seed000_tf_data_input.py": ("000", [("fence", 0), ("fence", 2), ("fence", 3)]),
    "seed000_mirrored.py": ("000", [("fence", 0), ("fence", 2), ("fence", 4)]),
    "mnist.py": ("001", [("In [2]:", 0, "return model")]),
    "seed001_basic.py": ("001", [("In [3]:", 0, "eval_loss, eval_acc = model.evaluate(test_dataset)")]),
    "simple_worker_mnist.py": ("001", [("In [4]:", 0,
                                        "eval_loss, eval_acc = multi_worker_model.evaluate(test_dataset)")]),
    "practical_mnist.py": ("001", [("In [5]:", 0, "model.save(path, save_format='tf')")]),
    "seed002_tf_config.py": ("002", [("fence", 0)]),
    "seed004_estimator_fashion_mnist.py": ("004", [
        ("In [1]:", 0, "import numpy as np"),
        ("In [2]:", 0, "(train_images, train_labels), (test_images, test_labels) = "
                       "tf.keras.datasets.fashion_mnist.load_data()"),
        ("In [3]:", 0, "test_images = test_images.reshape((TEST_SIZE, 28, 28, 1))"),
        ("In [4]:", 0, "test_labels = test_labels.astype(np.float32)"),
        ("In [5]:", 0, "predictions = tf.keras.layers.Dense(LABEL_DIMENSIONS, activation=tf.nn.softmax)(x)"),
        ("In [6]:", 0, "model = tf.keras.Model(inputs=inputs, outputs=predictions)"),
        ("In [7]:", 0, "optimizer = tf.train.AdamOptimizer(learning_rate=0.001)"),
        ("In [8]:", 0, "metrics=['accuracy'])"),
        ("In [9]:", 0, "estimator = tf.keras.estimator.model_to_estimator(model, config=config)"),
        ("In [10]:", 0, "return dataset"),
        ("In [13]:", 0, "steps=STEPS)"),
        ("In [15]:", 0, "batch_size=BATCH_SIZE//NUM_GPUS))"),
    ]),
    "seed004_estimator_image_folder.py": ("004", [
        ("In [1]:", 0, "import numpy as np"),
        ("In [None]:", 0, "#!kaggle datasets download -d paultimothymooney/kermany2018"),
        ("In [None]:", 1, "test_folder = os.path.join('OCT2017', 'test', '**', '*.jpeg')"),
        ("In [None]:", 2, "labels = ['CNV', 'DME', 'DRUSEN', 'NORMAL']"),
        ("In [None]:", 3, "return dataset"),
        ("In [None]:", 4, "include_top=False)"),
        ("In [None]:", 5, "predictions = tf.keras.layers.Dense(len(labels), activation=tf.nn.softmax)(output)"),
        ("In [None]:", 6, "layer.trainable = False"),
        ("In [None]:", 7, "optimizer = tf.train.AdamOptimizer()"),
        ("In [None]:", 8, "metrics=['accuracy'])"),
        ("In [None]:", 9, "estimator = tf.keras.estimator.model_to_estimator(model, config=config)"),
        ("In [None]:", 10, "steps=1000)"),
        ("In [None]:", 11, "prefetch_buffer_size=2))"),
    ]),
}

# Where TensorFlow downloads, the example reads a local stand-in; these lines are the data source.
_LEADING_NAME = re.compile(r"[\w.]+")
# The tests shorten runs through SEED_* variables (one line each; IMAGE_SIZE is read from SEED_IMAGE_SIZE).
_KNOB = re.compile(r"SEED_|IMAGE_SIZE")
# Seed lines that TensorFlow 2.21 (Keras 3) refuses too: assigning to options() (the seed's TF ignored it),
# and save_format (Keras 3 has none).
_TF_REFUSES = re.compile(r"\.options\(\)\.experimental_distribute\.auto_shard_policy = |save_format=")
_KINDS = ("import", "data", "tf2.21", "knob", "display", "other")
_DATA_SOURCE = re.compile(r"tfds|kaggle|digits|num_examples|splits|weights=|applications|from_tensor_slices\(\(x_train\[")


def seed_text(seeds_dir: str, number: str) -> list[str]:
    (path,) = Path(seeds_dir).glob(f"{number}_*.txt")
    return path.read_text().splitlines()


def fenced_block(lines: list[str], index: int) -> list[str]:
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in lines:
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks[index]


def notebook_cell(lines: list[str], header: str, occurrence: int, last_line: str) -> list[str]:
    starts = [i for i, line in enumerate(lines) if line.strip() == header]
    start = starts[occurrence] + 1
    for end in range(start, len(lines)):
        if lines[end].strip() == last_line.strip():
            cell = lines[start:end + 1]
            return [line for line in cell if not line.startswith("%%writefile")]
    raise ValueError(f"cell {header} #{occurrence}: no line {last_line!r} after it")


def snippet_lines(seeds_dir: str, number: str, specs: list[tuple]) -> list[str]:
    lines = seed_text(seeds_dir, number)
    out: list[str] = []
    for spec in specs:
        out += fenced_block(lines, spec[1]) if spec[0] == "fence" else notebook_cell(lines, *spec)
    return out


def _significant(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines if line.strip()]


def _similarity(line: str, candidate: str) -> float:
    if _kind(line, candidate) == "import":
        return 3.0  # the import line pairs with its replacement before anything else
    same_name = _LEADING_NAME.match(line.strip()) and (
        _LEADING_NAME.match(line.strip()).group() == (_LEADING_NAME.match(candidate.strip()) or [None])[0])
    return difflib.SequenceMatcher(None, line.strip(), candidate.strip()).ratio() + (0.5 if same_name else 0.0)


def _kind(line: str, replacement: str) -> str:
    if "import tensorflow as tf" in line and "stratagem.tf" in replacement:
        return "import"
    if _TF_REFUSES.search(line):
        return "tf2.21"
    if _DATA_SOURCE.search(line) or _DATA_SOURCE.search(replacement):
        return "data"
    if _KNOB.search(replacement):
        return "knob"
    if (replacement.strip().startswith("print(") and not line.strip().startswith("print(")) or (
            replacement.rstrip() == line.rstrip() + ")"):
        return "display"  # a notebook shows a cell's last value; a script prints it
    return "other"


def compare(seed: list[str], example: list[str]) -> dict:
    """Counts the seed lines the example changes (by kind) and the lines it adds."""
    seed, example = _significant(seed), _significant(example)
    counts = {"seed_lines": len(seed), "import": 0, "data": 0, "tf2.21": 0, "knob": 0, "display": 0, "other": 0, "added": 0, "pairs": []}
    matcher = difflib.SequenceMatcher(None, seed, example, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        old, new = seed[i1:i2], example[j1:j2]
        # Pair changed seed lines with example lines of the same hunk, most similar first (same leading name
        # counts extra); a seed line left without a partner was deleted, an example line without one was added.
        scores = sorted(((_similarity(line, candidate), i, j) for i, line in enumerate(old)
                         for j, candidate in enumerate(new)), reverse=True)
        partner: dict[int, int] = {}
        for score, i, j in scores:
            if score >= 0.4 and i not in partner and j not in partner.values():
                partner[i] = j
        for i, line in enumerate(old):
            replacement = new[partner[i]] if i in partner else ""
            kind = _kind(line, replacement)
            counts[kind] += 1
            counts["pairs"].append((kind, line, replacement))
        unused = [j for j in range(len(new)) if j not in partner.values()]
        counts["added"] += len(unused)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=os.environ.get("STRATAGEM_SEEDS_DIR", DEFAULT_SEEDS))
    parser.add_argument("--show", action="store_true", help="print every changed line beside the seed's")
    parser.add_argument("--unified", metavar="EXAMPLE", help="print the whole diff of one example (README's form)")
    args = parser.parse_args()
    if args.unified:
        number, specs = SNIPPETS[args.unified]
        seed = snippet_lines(args.seeds, number, specs)
        example = (HERE / args.unified).read_text().splitlines()
        diff = difflib.unified_diff(seed, example, lineterm="", n=len(seed) + len(example))
        print("\n".join(list(diff)[3:]))  # no file header and no hunk header: the script, marked
        return
    header = (f"{'example':38} {'seed':>4} {'lines':>5} {'changed':>7} {'import':>6} {'data':>4} {'tf2.21':>6} {'knob':>4} "
              f"{'display':>7} {'other':>5} {'added':>5}")
    print(header)
    print("-" * len(header))
    for example, (number, specs) in SNIPPETS.items():
        counts = compare(snippet_lines(args.seeds, number, specs), (HERE / example).read_text().splitlines())
        changed = sum(counts[kind] for kind in _KINDS)
        print(f"{example:38} {number:>4} {counts['seed_lines']:>5} {changed:>7} {counts['import']:>6} "
              f"{counts['data']:>4} {counts['tf2.21']:>6} {counts['knob']:>4} {counts['display']:>7} {counts['other']:>5} {counts['added']:>5}")
        if args.show:
            for kind, old, new in counts["pairs"]:
                print(f"    [{kind}] - {old.strip()}\n    {' ' * len(kind)}   + {new.strip()}")


if __name__ == "__main__":
    main()
