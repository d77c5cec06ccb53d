# The README's commands. Each target sets itself up: the venv is created and the
# project installed from pyproject.toml on first use (and again when pyproject changes).
# serve and demo install what a node needs (with pyspark, for Spark offload); test, bench,
# lint, soak and fuzz add the dev extra (pytest, moto, the Kafka clients, ...) on top.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev
ARGS   ?=
comma  := ,

.PHONY: serve demo test bench lint clean-venv fuzz soak

define install
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11 or run 'make PYTHON=python3 ...'"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -qq --upgrade pip
	$(BIN)/python -m pip install -qq -e '.[$(1)]'
endef

$(STAMP): pyproject.toml
	$(call install,spark)
	@touch $(STAMP)

# the dev install holds the node's install too: serve after test installs nothing more
$(DEV_STAMP): pyproject.toml
	$(call install,dev$(comma)spark)
	@touch $(STAMP) $(DEV_STAMP)

serve: $(STAMP)
	$(BIN)/tiercompact serve $(ARGS)

demo: $(STAMP)
	$(BIN)/tiercompact demo $(ARGS)

# pytest exits 5 when it collected nothing: treat that as a failure, never as green.
# TEST_WORKERS pytest-xdist workers, each given a whole test file at a time (module fixtures stay
# shared), in the order collected (tests/conftest.py hands out the slow files first);
# TEST_WORKERS=0 runs the suite in this one process.
TEST_WORKERS ?= 2
test: $(DEV_STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 $(ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests"; exit 1; fi; exit $$rc

bench: $(DEV_STAMP)
	$(BIN)/python -m bench $(ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check log remote metadata cleaner coordinator service tests bench
	$(BIN)/mypy log remote metadata cleaner coordinator service

clean-venv:
	rm -rf $(VENV)

# The soak of the real service (tests/soak): kill -9, S3 faults, model checks; runs for
# ARGS="--minutes N" (or TIERCOMPACT_SOAK_MINUTES, default 10) and prints a summary.
soak: $(DEV_STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

# The model state machine (tests/model) with fresh randomness, for as long as asked:
# FUZZ_EXAMPLES per batch and engine, FUZZ_SECONDS keeps running batches until that many
# seconds have passed on each engine, FUZZ_ENGINES a subset of local,file,s3,spark.
# e.g. make fuzz FUZZ_SECONDS=3600 FUZZ_ENGINES=file,s3 ARGS=-x
FUZZ_EXAMPLES ?= 1000
FUZZ_SECONDS  ?=
FUZZ_ENGINES  ?= local,file,s3,spark
fuzz: $(DEV_STAMP)
	TIERCOMPACT_TEST_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TIERCOMPACT_TEST_FUZZ_SECONDS=$(FUZZ_SECONDS) \
	TIERCOMPACT_TEST_FUZZ_ENGINES=$(FUZZ_ENGINES) \
	$(BIN)/python -m pytest tests/model/test_state_machine.py -s --timeout=0 -p no:cacheprovider $(ARGS)
