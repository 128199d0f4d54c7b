# Two commands for a fresh Debian machine with Python 3.11: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup system run test bench clean

HADOOP_FS := $(VENV)/share/penumbra/penumbra-hadoop.jar
CLASSES   := $(VENV)/share/penumbra/spark-driver.jsa

setup: system $(STAMP) $(HADOOP_FS) $(CLASSES)

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

# the classes of the job's JVM, archived by a short run of the job: a session starts in about
# half the time (scripts/build-class-archive.py); the run's output in $@.log
$(CLASSES): scripts/build-class-archive.py $(STAMP) $(HADOOP_FS)
	@echo "building the Spark job's class archive (a minute or two)"
	@$(BIN)/python scripts/build-class-archive.py $@ > $@.log 2>&1 || { tail -n 30 $@.log; exit 1; }
	@tail -n 1 $@.log

# Penumbra itself: redis-server, the Spark job and the API on 127.0.0.1 (docs/up.md); Ctrl-C stops it
run: setup
	$(BIN)/penumbra up --demo

test: setup
	$(BIN)/python -m pytest

bench: setup
	$(BIN)/python bench/kernels.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis bench/out
