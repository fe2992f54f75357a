# The two commands of the README. Each creates the venv on first use.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
# Real data sets sit in ../shared/data on this project's machines; elsewhere ./data
# (downloaded by torchvision on first use).
export TUNER_DATA_DIR ?= $(if $(wildcard ../shared/data/MNIST/raw),$(abspath ../shared/data),$(abspath data))

.PHONY: sweep spark test lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

sweep: $(VENV)/.installed  ## the default sweep: MNIST, ASHA, local Ray, MLflow in runs/mlflow.db; a second run goes to runs/mnist_asha-2
	$(PY) -m tuner sweep mnist_asha.yaml

spark: $(VENV)/.installed  ## the Spark pipeline (Java 17 needed): MNIST as Parquet, prepared by Spark on Ray, tuned by ASHA, predictions.csv
	test -d data/mnist_parquet || $(PY) examples/spark_mnist/make_parquet.py data/mnist_parquet
	$(PY) -m tuner sweep mnist_spark_asha.yaml
	run=$$(ls -dv runs/mnist_spark_asha runs/mnist_spark_asha-[0-9]* 2>/dev/null | tail -1) && \
		$(PY) -m tuner predict $$run/best --data mnist:test --out $$run/predictions.csv

# The suite waits on process starts (Ray, imports) more than on the cores: two test modules at
# a time, each in a worker of its own. A test that fails there runs again alone at once, and
# only its result alone counts: two modules' sweeps on 2 cores starve each other's timings
# (its first failure stays in the output above). The multi-node clusters (tests/cluster) run
# alone afterwards: beside another module's sweeps three of their tests failed (a trial not
# placed on the worker node, Train's cleanup actor outliving the leak check); their nodes
# are declared dead after 5 s without a health check.
TEST_WORKERS ?= 2

test: $(VENV)/.installed  ## unit tests and integration tests on a real local Ray, two modules at a time
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --ignore=tests/cluster; \
	rest=$$?; \
	if [ $$rest -ne 0 ]; then echo "== the failures above, again one at a time"; \
		$(PY) -m pytest --last-failed --last-failed-no-failures=none --ignore=tests/cluster; rest=$$?; fi; \
	$(PY) -m pytest tests/cluster && exit $$rest

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check tuner tests

clean:
	rm -rf runs mlruns mlflow.db
