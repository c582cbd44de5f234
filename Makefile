# The two commands of the README: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: demo test lint typecheck unit bench scheduler-perf k8s-binaries helm controllers conformance clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(VENV)/bin/topos demo

# Builds (or finds in ~/.cache/topos/k8s) etcd, kube-apiserver, kube-controller-manager and kubectl,
# helm (~/.cache/topos/helm) and the workload controllers (~/.cache/topos/controllers), runs the quality gates, then the whole suite. pytest's exit status 5 (no tests collected) is a failure here too:
# a green run must have run tests.
test: $(STAMP) k8s-binaries helm controllers lint typecheck
	@rc=0; $(PY) -m pytest -q -p no:cacheprovider --durations=30 $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# --all: kube-scheduler (differential tests) and KWOK (benchmarks) too, not only etcd,
# kube-apiserver and kubectl.
k8s-binaries: $(STAMP)
	$(PY) -m devcluster.binaries ensure --all || { [ "$$CI" != "true" ] && echo "warning: Kubernetes binaries unavailable; control-plane tests will be skipped"; }

# helm for the chart's tests (tests/deploy/test_helm_chart.py: lint, template, compared with the
# kustomize base), built from the helm.sh/helm/v3 Go module: ~2 min on a clean machine, then cached.
helm: $(STAMP)
	$(PY) -m devcluster.helm ensure || { [ "$$CI" != "true" ] && echo "warning: helm unavailable; the Helm chart's tests will be skipped"; }

# The workload controllers users run (JobSet, LeaderWorkerSet, Kubeflow Trainer, KubeRay) and Kueue
# for tests/e2e_workloads and `topos devcluster up --workloads` / `--kueue`, each built from its Go
# module at its exact version (docs/workloads.md, docs/kueue.md): about 23 min cold on a busy
# two-core machine, then cached.
controllers: $(STAMP)
	$(PY) -m devcluster.workloads ensure || { [ "$$CI" != "true" ] && echo "warning: workload controllers unavailable; their tests will be skipped"; }

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/hadolint Dockerfile.agent Dockerfile.coordinator

typecheck: $(STAMP)
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[dev,bench]'
	$(PY) -m benchmarks.run_all

# Upstream's scheduler_perf cases (v1.36.3 workload YAML) on KWOK, Topos against kube-scheduler in
# one control plane: the table in docs/benchmarks.md. About an hour on 2 cores: by hand, after a
# change to the scheduling path, not in CI (docs/testing.md#upstreams-scheduler_perf-cases).
scheduler-perf: $(STAMP)
	$(PY) -m devcluster.binaries ensure --all
	$(PY) -m benchmarks.scheduler_perf_suite

# Upstream's [sig-scheduling] e2e tests against Topos as default-scheduler on KWOK nodes; results in
# docs/conformance.md. Builds Kubernetes' e2e.test once (~/.cache/topos/e2e). Not part of `test`
# (its duration: docs/testing.md#upstream-conformance).
conformance: $(STAMP)
	$(PY) -m devcluster.binaries ensure --all
	$(PY) -m devcluster.conformance --write docs/conformance.md

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
