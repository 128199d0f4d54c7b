# Two commands for a fresh Debian machine with Python 3.11: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system run test bench clean

HADOOP_FS := $(VENV)/share/penumbra/penumbra-hadoop.jar

setup: system $(STAMP) $(HADOOP_FS)

system:
	@bash scripts/system-deps.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[spark,service,test,bench]'
	touch $(STAMP)

# the Spark job's local file system: permissions set without a chmod process (spark_jobs/hadoop)
$(HADOOP_FS): spark_jobs/hadoop/LocalFileSystem.java scripts/build-hadoop-fs.sh $(STAMP)
	bash scripts/build-hadoop-fs.sh $(BIN)/python $@

# Penumbra itself: redis-server, the Spark job and the API on 127.0.0.1 (docs/up.md); Ctrl-C stops it
run: setup
	$(BIN)/penumbra up --demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/kernels.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis bench/out
