# mixed-cpus-hook developer entry points. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv deps demo test test-unit lint bench bench-reapply clean

$(VENV)/.stamp: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . pytest pyfakefs ruff prometheus_client grpcio grpcio-tools kubernetes-validate
	touch $@

venv: $(VENV)/.stamp

deps:
	sh scripts/install-deps.sh

# The demo needs only the package and its runtime dependencies (no test tools, no apt), and its
# fake node's hook logs to stderr only: MIXED_CPUS_HOOK_NO_SYSLOG keeps it out of the host's journal.
DEMO_VENV ?= .venv-demo
$(DEMO_VENV)/.stamp: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e .
	touch $@

demo: $(DEMO_VENV)/.stamp
	MIXED_CPUS_HOOK_NO_SYSLOG=1 $(DEMO_VENV)/bin/python examples/quickstart.py

lint: venv
	$(VENV)/bin/ruff check hook tests benchmarks examples

test-unit: venv
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

# Everything: lint (also for Python 3.9), the unit tests on Python 3.9 with RHEL 9's dependency
# versions, then every test (unit and integration: real runc, podman, systemd, a cgroup v2 VM)
# with the newest versions.
# Without a python3.9 (a fresh Debian 12 or Fedora machine) the Python 3.9 part is skipped, loudly:
# test-compat-or-skip runs what runs anywhere (ruff's 3.9 rules) and says what it could not run.
test: deps venv lint test-compat-or-skip
	$(PY) -m pytest tests -ra $(PYTEST_ARGS)
	@test -n "$(PY39)" || echo "make test: SKIPPED the Python 3.9 / RHEL 9 suite (no python3.9 found; set PY39=...)"

.PHONY: test-compat-or-skip man
test-compat-or-skip:
	@if [ -n "$(PY39)" ]; then $(MAKE) --no-print-directory test-compat; else \
	    echo "test-compat: no python3.9 found: SKIPPED vermin and the unit tests on Python 3.9 with RHEL 9's pins"; \
	    echo "test-compat: running what needs no 3.9: ruff --target-version py39"; \
	    $(VENV)/bin/ruff check --target-version py39 hook; fi

# docs/mixed-cpus-hook.8 from the click definitions (tests/unit/test_manpage.py fails when it is stale).
man: venv
	$(PY) -m mixed_cpus_hook.manpage --schema schemas/config.schema.json -o docs/mixed-cpus-hook.8

# Start-up ratios (no root); reapply latency under a real systemd and reconcile scaling (root).
bench: venv
	$(PY) benchmarks/run.py

bench-reapply: venv
	$(PY) benchmarks/reapply_latency.py
	$(PY) benchmarks/reconcile_scaling.py

clean:
	rm -rf $(VENV) build dist *.egg-info hook/*.egg-info

# ---- Packaging (issue #4): make install, make rpm; RHEL 9 compatibility: make test-compat --------
NAME := mixed-cpus-hook
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' hook/mixed_cpus_hook/__init__.py)

# `make install DESTDIR=... PREFIX=...` lays down the tree the RPM ships, for any distribution;
# every directory can be overridden (rpm/mixed-cpus-hook.spec passes its macros).
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
SYSCONFDIR ?= /etc
DOCDIR ?= $(DATADIR)/doc/$(NAME)
LICENSEDIR ?= $(DATADIR)/licenses/$(NAME)
UNITDIR ?= $(PREFIX)/lib/systemd/system
PRESETDIR ?= $(PREFIX)/lib/systemd/system-preset
TMPFILESDIR ?= $(PREFIX)/lib/tmpfiles.d
# CRI-O reads only this directory by default (crio.conf hooks_dir), whatever PREFIX is.
HOOKSDIR ?= /usr/share/containers/oci/hooks.d
# PYTHON builds and installs the package (pip, setuptools); its files go to PYTHON_SITELIB
# (default: PREFIX's "posix_prefix" site-packages, not Debian's local/ scheme). HOOK_PYTHON is the
# interpreter in the executable's #! line; BYTECOMPILE (empty: none) compiles the modules for it
# (hard-linking each .opt-1.pyc that equals its .pyc, as Fedora's brp-python-hardlink does).
# (Each default is computed once, on first use: `X = $(eval X := ...)$(X)`.)
ifeq ($(origin PYTHON_SITELIB),undefined)
PYTHON_SITELIB = $(eval PYTHON_SITELIB := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib", "posix_prefix", vars={"base": "$(PREFIX)", "platbase": "$(PREFIX)"}))'))$(PYTHON_SITELIB)
endif
ifeq ($(origin HOOK_PYTHON),undefined)
HOOK_PYTHON = $(eval HOOK_PYTHON := $(shell $(PYTHON) -c 'import sys; print(sys.executable)'))$(HOOK_PYTHON)
endif
BYTECOMPILE ?= $(HOOK_PYTHON)
# Offline build when setuptools and wheel are importable (rpmbuild); else pip fetches them.
PIP_BUILD_FLAGS ?= $(shell $(PYTHON) -c 'import setuptools, wheel' >/dev/null 2>&1 && echo --no-build-isolation --no-index)
INSTALL ?= install
# dist-info/INSTALLER: who installed the package (pip shows it); the spec says rpm.
DIST_INSTALLER ?= make
UNITS := $(sort $(wildcard rpm/units/*.service rpm/units/*.path rpm/units/*.timer))
DOC_FILES := $(wildcard README.md docs/openshift.md)
MANDIR ?= $(DATADIR)/man
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
SCHEMAS := $(sort $(wildcard schemas/*.json))
STAGE := build/install-stage

.PHONY: install rpm tarball test-compat lint-py39 preset

# The package goes through pip (a wheel, installed with --target into a staging directory, then
# copied), so its dist-info metadata is the real one. The executable is a 4-line script, not pip's
# console-script wrapper: the stdlib-only fast path, then click for every other command. Its #! line
# has -I (isolated: -E and -s, and no script directory on sys.path): CRI-O runs it as root with
# CRI-O's environment, which must not steer it through PYTHONPATH & co., and it skips the user
# site lookups. (-S would save the site module's few ms too, but PyYAML, click and psutil live in
# site-packages.) The default configuration is installed only where there is none yet (the RPM
# marks it %config(noreplace)); the units with the paths of BINDIR, HOOK_PYTHON and DOCDIR in
# place of /usr/bin/mixed-cpus-hook, /usr/bin/python3 and /usr/share/doc/mixed-cpus-hook; the
# hooks.d files last and atomically, with hook.path = BINDIR's executable, because hook.path
# must exist whenever CRI-O (re)loads a file.
install:
	@test -n "$(PYTHON_SITELIB)" || { echo "make install: cannot derive PYTHON_SITELIB from $(PYTHON)" >&2; exit 1; }
	rm -rf $(STAGE) build/lib build/bdist.*
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --no-compile $(PIP_BUILD_FLAGS) --target $(STAGE) .
	rm -rf $(STAGE)/bin $(STAGE)/*.dist-info/direct_url.json $(STAGE)/*.dist-info/RECORD
	echo $(DIST_INSTALLER) > $(STAGE)/mixed_cpus_hook-$(VERSION).dist-info/INSTALLER
	$(INSTALL) -d $(DESTDIR)$(PYTHON_SITELIB)
	rm -rf $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook-*.dist-info
	cp -R $(STAGE)/mixed_cpus_hook $(STAGE)/mixed_cpus_hook-$(VERSION).dist-info $(DESTDIR)$(PYTHON_SITELIB)/
	chmod -R u=rwX,go=rX $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook-$(VERSION).dist-info
	if [ -n "$(BYTECOMPILE)" ]; then $(BYTECOMPILE) -m compileall -q -f -o 0 -o 1 \
	    -d $(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook && \
	    for f in $$(find $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook -name '*.opt-1.pyc'); do \
	        cmp -s "$$f" "$${f%.opt-1.pyc}.pyc" && ln -f "$${f%.opt-1.pyc}.pyc" "$$f"; done; true; fi
	$(INSTALL) -d $(DESTDIR)$(BINDIR)
	printf '%s\n' '#!$(HOOK_PYTHON) -I' \
	    '# mixed-cpus-hook: the OCI hook (hooks.d runs "apply" and "release") and its command line.' \
	    'from mixed_cpus_hook.fastpath import entry' 'entry()' > $(STAGE)/$(NAME)
	$(INSTALL) -m 755 $(STAGE)/$(NAME) $(DESTDIR)$(BINDIR)/$(NAME)
	$(INSTALL) -d $(DESTDIR)$(DATADIR)/$(NAME) $(DESTDIR)$(SYSCONFDIR)/$(NAME) $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(PRESETDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LICENSEDIR) $(DESTDIR)$(HOOKSDIR)
	$(INSTALL) -m 644 $(SCHEMAS) $(DESTDIR)$(DATADIR)/$(NAME)/
	test -e $(DESTDIR)$(SYSCONFDIR)/$(NAME)/config.yaml || \
	    $(INSTALL) -m 644 rpm/config.yaml $(DESTDIR)$(SYSCONFDIR)/$(NAME)/config.yaml
	for u in $(UNITS); do \
	    sed -e 's#/usr/bin/$(NAME)#$(BINDIR)/$(NAME)#g' -e 's#/usr/bin/python3 #$(HOOK_PYTHON) #g' \
	        -e 's#/usr/share/doc/$(NAME)/#$(DOCDIR)/#g' $$u > $(STAGE)/unit && \
	    $(INSTALL) -m 644 $(STAGE)/unit $(DESTDIR)$(UNITDIR)/$$(basename $$u) || exit 1; \
	done
	$(INSTALL) -m 644 rpm/90-$(NAME).preset $(DESTDIR)$(PRESETDIR)/90-$(NAME).preset
	$(INSTALL) -m 644 rpm/$(NAME).tmpfiles $(DESTDIR)$(TMPFILESDIR)/$(NAME).conf
	$(INSTALL) -m 644 $(DOC_FILES) rpm/config.yaml $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 LICENSE $(DESTDIR)$(LICENSEDIR)/
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	$(INSTALL) -m 644 docs/$(NAME).8 $(DESTDIR)$(MANDIR)/man8/$(NAME).8
	$(INSTALL) -m 644 completion/$(NAME).bash $(DESTDIR)$(BASHCOMPDIR)/$(NAME)
	$(INSTALL) -m 644 completion/_$(NAME) $(DESTDIR)$(ZSHCOMPDIR)/_$(NAME)
	for f in hooks.d/*.json; do \
	    sed 's#"/usr/bin/$(NAME)"#"$(BINDIR)/$(NAME)"#' $$f > $(STAGE)/hook.json && \
	    $(INSTALL) -m 644 $(STAGE)/hook.json $(DESTDIR)$(HOOKSDIR)/.$$(basename $$f).tmp && \
	    mv -f $(DESTDIR)$(HOOKSDIR)/.$$(basename $$f).tmp $(DESTDIR)$(HOOKSDIR)/$$(basename $$f) || exit 1; \
	done

# rpm/90-mixed-cpus-hook.preset: enable every non-template unit of rpm/units/ with an [Install]
# section (tests/unit/test_machineconfig.py fails when it is out of date).
preset:
	PYTHONPATH=hook $(PYTHON) -c 'import sys; from mixed_cpus_hook.machineconfig import preset_for_files; \
	    sys.stdout.write(preset_for_files(sys.argv[1:]))' $(UNITS) > rpm/90-$(NAME).preset

# The source tarball: every file git tracks or would add (uncommitted work included), else the tree.
DIST ?= dist
TARBALL = $(DIST)/$(NAME)-$(VERSION).tar.gz
tarball:
	mkdir -p $(DIST)
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	    git ls-files -z --cached --others --exclude-standard | \
	    tar --null --files-from=- --ignore-failed-read --sort=name --owner=0 --group=0 --numeric-owner \
	        --transform 's,^,$(NAME)-$(VERSION)/,' -czf $(TARBALL); \
	else \
	    tar --exclude-vcs --exclude=./$(DIST) --exclude='./.venv*' --exclude=./build --exclude='*.egg-info' \
	        --exclude=__pycache__ --sort=name --owner=0 --group=0 --numeric-owner \
	        --transform 's,^\./,$(NAME)-$(VERSION)/,' -czf $(TARBALL) .; \
	fi

# `make rpm`: the binary RPM in $(DIST)/, with rpmbuild -bb. On a host whose package manager is not rpm
# (Debian) the rpm database is empty, so BuildRequires cannot be checked there (--nodeps). Where the
# python-rpm-macros are missing the spec targets RHEL 9's layout (python3.9) and byte-compiles with
# RPM_BYTECOMPILE when it is set (a python3.9; RHEL's rpmbuild byte-compiles by itself).
RPMBUILD ?= rpmbuild
PY39 ?= $(firstword $(wildcard /usr/bin/python3.9 /usr/local/bin/python3.9 $(PYENV_ROOT)/versions/3.9*/bin/python3.9 $(HOME)/.pyenv/versions/3.9*/bin/python3.9 /root/.pyenv/versions/3.9*/bin/python3.9))
RPM_BYTECOMPILE ?= $(PY39)
RPMBUILD_FLAGS ?= $(shell rpm -q rpm >/dev/null 2>&1 || echo --nodeps)
rpm: tarball
	@test "$$(sed -n 's/^Version: *//p' rpm/$(NAME).spec)" = "$(VERSION)" || \
	    { echo "make rpm: Version in rpm/$(NAME).spec is not $(VERSION) (hook/mixed_cpus_hook/__init__.py)" >&2; exit 1; }
	rm -rf $(DIST)/rpmbuild
	$(RPMBUILD) -bb $(RPMBUILD_FLAGS) \
	    --define "_topdir $(abspath $(DIST))/rpmbuild" --define "_sourcedir $(abspath $(DIST))" \
	    --define "_rpmdir $(abspath $(DIST))" --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
	    $(if $(RPM_BYTECOMPILE),--define "bytecompile_python $(RPM_BYTECOMPILE)") \
	    rpm/$(NAME).spec
	rm -rf $(DIST)/rpmbuild
	@ls -1 $(DIST)/$(NAME)-$(VERSION)-*.rpm

# Unit tests on Python 3.9 with the oldest dependency versions we support: those of RHEL 9.
COMPAT_VENV ?= .venv-py39
COMPAT_PINS := click==7.1.2 jsonschema==3.2.0 PyYAML==5.4.1 psutil==5.8.0 protobuf==3.14.0 tomli==1.2.3
$(COMPAT_VENV)/.stamp: setup.cfg pyproject.toml
	@test -n "$(PY39)" || { echo "test-compat: no python3.9 found; set PY39=/path/to/python3.9" >&2; exit 1; }
	rm -rf $(COMPAT_VENV)
	$(PY39) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check $(COMPAT_PINS) pytest pyfakefs prometheus_client vermin
	$(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

lint-py39: venv $(COMPAT_VENV)/.stamp
	$(VENV)/bin/ruff check --target-version py39 hook
	$(COMPAT_VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- hook

test-compat: lint-py39
	$(COMPAT_VENV)/bin/python -c 'import sys, click, jsonschema, yaml, psutil; \
	    print("python", sys.version.split()[0], "click", click.__version__, "jsonschema", jsonschema.__version__, \
	          "PyYAML", yaml.__version__, "psutil", psutil.__version__)'
	$(COMPAT_VENV)/bin/python -m pytest tests/unit -q $(PYTEST_ARGS)

# ---- Container image and cluster manifests (issue #17; docs/nri.md) ------------------------------
# `make image`: the NRI plugin's image from the Containerfile (UBI 9 bases by default: pass
# BUILD_ARGS="--build-arg BASE=... --build-arg BUILDER=..." for others). `make deploy-config`:
# deploy/base/config.yaml from the schema. The tests build the image on Debian bullseye instead
# (tests/integration/plugin_image.py) and render deploy/ with kubectl kustomize.
IMAGE ?= localhost/mixed-cpus-hook:$(VERSION)
IMAGE_BUILD ?= $(if $(shell command -v buildah 2>/dev/null),buildah bud,podman build)
BUILD_ARGS ?=
.PHONY: image deploy-config
image:
	$(IMAGE_BUILD) -f Containerfile --build-arg VERSION=$(VERSION) $(BUILD_ARGS) -t $(IMAGE) .

deploy-config:
	$(PYTHON) scripts/gen-deploy-config.py
