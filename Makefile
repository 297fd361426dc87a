# mixed-cpus-hook developer entry points. `make demo` and `make test` are the README's quick start.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: venv deps demo test test-unit lint stubs bench bench-nri bench-footprint bench-reapply clean

$(VENV)/.stamp: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e . pytest pyfakefs ruff prometheus_client grpcio grpcio-tools import-linter kubernetes-validate \
	    'mypy>=1.14,<2' types-PyYAML types-protobuf types-psutil
	touch $@

venv: $(VENV)/.stamp

deps:
	sh scripts/install-deps.sh

# The demo (both modes on fake nodes) needs only the package and its runtime dependencies (no test
# tools, no apt, no root), and logs to stderr only: MIXED_CPUS_HOOK_NO_SYSLOG keeps it out of the
# host's journal. `make demo DEMO_ARGS=--keep` keeps the fake nodes.
DEMO_VENV ?= .venv-demo
$(DEMO_VENV)/.stamp: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e .
	touch $@

DEMO_ARGS ?=
demo: $(DEMO_VENV)/.stamp
	MIXED_CPUS_HOOK_NO_SYSLOG=1 $(DEMO_VENV)/bin/python examples/quickstart.py $(DEMO_ARGS)

# ruff (with the complexity limit), the layering contracts of pyproject.toml (import-linter: front
# ends > operations > use cases > store > node adapters > core), then mypy over the package
# ([tool.mypy]; mypy 1.x, the last to check for a Python 3.9 target).
lint: venv
	$(VENV)/bin/ruff check hook tests benchmarks examples
	cd hook && ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(VENV)/bin/mypy

# The .pyi of the NRI messages, from the tables of wire/api.py (tests/unit/nri/test_stubs.py fails
# when it is stale).
stubs: venv
	$(PY) -m mixed_cpus_hook.frontends.nri.wire.stubgen

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
	    $(VENV)/bin/ruff check --target-version py39 --ignore C901 hook; fi

# docs/mixed-cpus-hook.8 from the click definitions (tests/unit/test_manpage.py fails when it is stale).
man: venv
	$(PY) -m mixed_cpus_hook.frontends.cli.manpage --schema schemas/config.schema.json -o docs/mixed-cpus-hook.8

# Start-up ratios (no root); reapply latency under a real systemd and reconcile scaling (root).
bench: venv
	$(PY) benchmarks/run.py

bench-nri: venv
	$(PY) benchmarks/nri_reference.py --runs 3 $(if $(NRI_NODE),--state-tmpfs,--tmpfs) --floor --no-record-io --go-work --duties $(if $(NRI_PYTHON),--python $(NRI_PYTHON)) $(if $(NRI_ROOTFS),--rootfs $(NRI_ROOTFS)) $(if $(NRI_BUSY),--busy)

bench-footprint: venv
	$(PY) benchmarks/nri_cache_footprint.py

bench-reapply: venv
	$(PY) benchmarks/reapply_latency.py
	$(PY) benchmarks/reconcile_scaling.py

clean:
	rm -rf $(VENV) build dist *.egg-info hook/*.egg-info

# ---- Packaging: make install / uninstall, make rpm; RHEL 9 compatibility: make test-compat -------------
NAME := mixed-cpus-hook
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' hook/mixed_cpus_hook/__init__.py)

# `make install MODE=hook|nri DESTDIR=... PREFIX=...` lays down the tree the RPMs ship, for any
# distribution, for ONE mode (one node, one mode): MODE=hook the hooks.d files and the units that
# undo kubelet's rewrites (CRI-O, podman); MODE=nri the NRI plugin's unit (containerd, CRI-O);
# MODE=all both, for packagers who split them (the spec does). Every directory can be overridden
# (rpm/mixed-cpus-hook.spec passes its macros). `make uninstall` removes what it laid down.
MODE ?=
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
# The TARGET system's python3, which runs everything installed: its path goes into the
# executable's #! line and the units' ExecStart, its own site directory receives the package
# (asked of it: the entry of site.getsitepackages() under PREFIX/lib/, e.g. Debian's
# /usr/lib/python3/dist-packages, RHEL's /usr/lib/python3.9/site-packages), and BYTECOMPILE (empty:
# none) compiles the modules for it (hard-linking each .opt-1.pyc that equals its .pyc, as Fedora's
# brp-python-hardlink does). PYTHON3_RUN runs that interpreter from here when it is not this
# machine's own (e.g. `chroot /srv/target /usr/bin/python3`; then set BYTECOMPILE= too).
# PYTHON (any python3 with pip) only builds the wheel; a venv's interpreter never reaches the tree.
# (Each default is computed once, on first use: `X = $(eval X := ...)$(X)`.)
PYTHON3 ?= /usr/bin/python3
PYTHON3_RUN ?= $(PYTHON3)
ifeq ($(origin PYTHON_SITELIB),undefined)
PYTHON_SITELIB = $(eval PYTHON_SITELIB := $(shell $(PYTHON3_RUN) -c 'import site; p = "$(PREFIX)".rstrip("/") + "/lib/"; \
    print(next((d for d in site.getsitepackages() if d.startswith(p)), ""))' 2>/dev/null))$(PYTHON_SITELIB)
endif
ifeq ($(origin BYTECOMPILE),undefined)
BYTECOMPILE = $(eval BYTECOMPILE := $(if $(filter $(PYTHON3),$(PYTHON3_RUN)),$(shell test -x $(PYTHON3) && echo $(PYTHON3))))$(BYTECOMPILE)
endif
# HOOKBUNDLE (empty: none) writes the hook path's bundle (mixed_cpus_hook/__init__.py says why) with
# the interpreter that compiles, else the target's when it runs here: it must be the one that runs it.
# The bundle (like a .pyc) records each source's mtime: with SOURCE_DATE_EPOCH set (rpmbuild sets it
# from the changelog), the package's files newer than it are clamped to it first, as Fedora's
# brp-python-bytecompile would do after %install, so that no later step changes what was recorded.
ifeq ($(origin HOOKBUNDLE),undefined)
HOOKBUNDLE = $(eval HOOKBUNDLE := $(or $(BYTECOMPILE),$(if $(filter $(PYTHON3),$(PYTHON3_RUN)),$(shell test -x $(PYTHON3) && echo $(PYTHON3)))))$(HOOKBUNDLE)
endif
# Offline build when setuptools and wheel are importable (rpmbuild); else pip fetches them.
PIP_BUILD_FLAGS ?= $(shell $(PYTHON) -c 'import setuptools, wheel' >/dev/null 2>&1 && echo --no-build-isolation --no-index)
INSTALL ?= install
# dist-info/INSTALLER: who installed the package (pip shows it); the spec says rpm.
DIST_INSTALLER ?= make
# What `make uninstall` removes: every file and directory install laid down (empty: none written,
# as for the RPM, whose database keeps that list).
MANIFEST ?= $(DATADIR)/$(NAME)/install-manifest
UNITS := $(sort $(wildcard rpm/units/*.service rpm/units/*.path rpm/units/*.timer))
NRI_UNITS := rpm/units/$(NAME)-nri.service
HOOK_UNITS := $(filter-out $(NRI_UNITS),$(UNITS))
DOC_FILES := $(wildcard README.md docs/openshift.md docs/nri.md)
MANDIR ?= $(DATADIR)/man
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
SCHEMAS := $(sort $(wildcard schemas/*.json))
STAGE := build/install-stage
MODE_UNITS = $(if $(filter hook,$(MODE)),$(HOOK_UNITS))$(if $(filter nri,$(MODE)),$(NRI_UNITS))$(if $(filter all,$(MODE)),$(UNITS))
# The units each mode enables (its preset's "enable" lines).
MODE_ENABLED = $(shell sed -n 's/^enable //p' $(addprefix rpm/,$(MODE_PRESETS)))
MODE_PRESETS = $(if $(filter hook all,$(MODE)),90-$(NAME).preset) $(if $(filter nri all,$(MODE)),90-$(NAME)-nri.preset)

.PHONY: install uninstall rpm tarball test-compat lint-py39 preset

# The package goes through pip (a wheel, installed with --target into a staging directory, then
# copied), so its dist-info metadata is the real one. The executable is a 4-line script, not pip's
# console-script wrapper: the stdlib-only fast path, then click for every other command. Its #! line
# has -I (isolated: -E and -s, and no script directory on sys.path): CRI-O runs it as root with
# CRI-O's environment, which must not steer it through PYTHONPATH & co., and it skips the user
# site lookups. (-S would save the site module's few ms too, but PyYAML, click and psutil live in
# site-packages.) The default configuration is installed only where there is none yet (the RPM
# marks it %config(noreplace)); the units with the paths of BINDIR, PYTHON3 and DOCDIR in
# place of /usr/bin/mixed-cpus-hook, /usr/bin/python3 and /usr/share/doc/mixed-cpus-hook; the
# hooks.d files last and atomically, with hook.path = BINDIR's executable, because hook.path
# must exist whenever CRI-O (re)loads a file.
install:
	@case "$(MODE)" in hook|nri|all) ;; *) echo "make install: choose the node's mode: MODE=hook (CRI-O or podman runs the hook; the reapply units) or MODE=nri (the NRI plugin; containerd or CRI-O); MODE=all installs both, for packagers only" >&2; exit 2 ;; esac
	@test -n "$(PYTHON_SITELIB)" || { echo "make install: $(PYTHON3) ($(PYTHON3_RUN)) has no site directory under $(PREFIX)/lib/: set PYTHON_SITELIB, or PYTHON3 to the target's python3" >&2; exit 1; }
	@if [ "$(MODE)" = nri ] && [ -e "$(DESTDIR)$(HOOKSDIR)/$(NAME).json" ]; then echo "make install MODE=nri: hook mode is installed here ($(DESTDIR)$(HOOKSDIR)/$(NAME).json): one node, one mode: make uninstall first" >&2; exit 1; fi
	@if [ "$(MODE)" = hook ] && [ -e "$(DESTDIR)$(UNITDIR)/$(NAME)-nri.service" ]; then echo "make install MODE=hook: NRI mode is installed here ($(DESTDIR)$(UNITDIR)/$(NAME)-nri.service): one node, one mode: make uninstall first" >&2; exit 1; fi
	rm -rf $(STAGE) build/lib build/bdist.*
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install -q --disable-pip-version-check --no-deps --no-compile $(PIP_BUILD_FLAGS) --target $(STAGE) .
	rm -rf $(STAGE)/bin $(STAGE)/*.dist-info/direct_url.json $(STAGE)/*.dist-info/RECORD
	echo $(DIST_INSTALLER) > $(STAGE)/mixed_cpus_hook-$(VERSION).dist-info/INSTALLER
	: > $(STAGE)/created
	$(INSTALL) -d $(DESTDIR)$(PYTHON_SITELIB)
	rm -rf $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook-*.dist-info
	cp -R $(STAGE)/mixed_cpus_hook $(STAGE)/mixed_cpus_hook-$(VERSION).dist-info $(DESTDIR)$(PYTHON_SITELIB)/
	chmod -R u=rwX,go=rX $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook-$(VERSION).dist-info
	if [ -n "$$SOURCE_DATE_EPOCH" ]; then find $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook -newermt "@$$SOURCE_DATE_EPOCH" \
	    -exec touch -h -m -d "@$$SOURCE_DATE_EPOCH" {} +; fi
	if [ -n "$(BYTECOMPILE)" ]; then $(BYTECOMPILE) -m compileall -q -f -o 0 -o 1 \
	    -d $(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook && \
	    for f in $$(find $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook -name '*.opt-1.pyc'); do \
	        cmp -s "$$f" "$${f%.opt-1.pyc}.pyc" && ln -f "$${f%.opt-1.pyc}.pyc" "$$f"; done; true; fi
	if [ -n "$(HOOKBUNDLE)" ]; then PYTHONPATH=$(DESTDIR)$(PYTHON_SITELIB) $(HOOKBUNDLE) -s -m mixed_cpus_hook.ops.hookbundle \
	    --ddir $(PYTHON_SITELIB)/mixed_cpus_hook $(DESTDIR)$(PYTHON_SITELIB)/mixed_cpus_hook; fi
	$(INSTALL) -d $(DESTDIR)$(BINDIR)
	printf '%s\n' '#!$(PYTHON3) -I' \
	    '# mixed-cpus-hook: the OCI hook (hooks.d runs "apply" and "release") and its command line.' \
	    'from mixed_cpus_hook.frontends.entry import entry' 'entry()' > $(STAGE)/$(NAME)
	$(INSTALL) -m 755 $(STAGE)/$(NAME) $(DESTDIR)$(BINDIR)/$(NAME)
	test -d $(DESTDIR)$(SYSCONFDIR)/$(NAME) || echo "d $(SYSCONFDIR)/$(NAME)" >> $(STAGE)/created
	$(INSTALL) -d $(DESTDIR)$(DATADIR)/$(NAME) $(DESTDIR)$(SYSCONFDIR)/$(NAME) $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(PRESETDIR) $(DESTDIR)$(TMPFILESDIR) $(DESTDIR)$(DOCDIR) $(DESTDIR)$(LICENSEDIR)
	$(INSTALL) -m 644 $(SCHEMAS) $(DESTDIR)$(DATADIR)/$(NAME)/
	test -e $(DESTDIR)$(SYSCONFDIR)/$(NAME)/config.yaml || { \
	    $(INSTALL) -m 644 rpm/config.yaml $(DESTDIR)$(SYSCONFDIR)/$(NAME)/config.yaml && \
	    echo "c $(SYSCONFDIR)/$(NAME)/config.yaml $$(sha256sum < rpm/config.yaml | cut -d' ' -f1)" >> $(STAGE)/created; }
	for u in $(MODE_UNITS); do \
	    sed -e 's#/usr/bin/$(NAME)#$(BINDIR)/$(NAME)#g' -e 's#/usr/bin/python3 #$(PYTHON3) #g' \
	        -e 's#/usr/share/doc/$(NAME)/#$(DOCDIR)/#g' $$u > $(STAGE)/unit && \
	    $(INSTALL) -m 644 $(STAGE)/unit $(DESTDIR)$(UNITDIR)/$$(basename $$u) || exit 1; \
	done
	for p in $(MODE_PRESETS); do $(INSTALL) -m 644 rpm/$$p $(DESTDIR)$(PRESETDIR)/$$p || exit 1; done
	$(INSTALL) -m 644 rpm/$(NAME).tmpfiles $(DESTDIR)$(TMPFILESDIR)/$(NAME).conf
	$(INSTALL) -m 644 $(DOC_FILES) rpm/config.yaml $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 LICENSE $(DESTDIR)$(LICENSEDIR)/
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR)
	$(INSTALL) -m 644 docs/$(NAME).8 $(DESTDIR)$(MANDIR)/man8/$(NAME).8
	$(INSTALL) -m 644 completion/$(NAME).bash $(DESTDIR)$(BASHCOMPDIR)/$(NAME)
	$(INSTALL) -m 644 completion/_$(NAME) $(DESTDIR)$(ZSHCOMPDIR)/_$(NAME)
	if [ "$(MODE)" != nri ]; then $(INSTALL) -d $(DESTDIR)$(HOOKSDIR) && for f in hooks.d/*.json; do \
	    sed 's#"/usr/bin/$(NAME)"#"$(BINDIR)/$(NAME)"#' $$f > $(STAGE)/hook.json && \
	    $(INSTALL) -m 644 $(STAGE)/hook.json $(DESTDIR)$(HOOKSDIR)/.$$(basename $$f).tmp && \
	    mv -f $(DESTDIR)$(HOOKSDIR)/.$$(basename $$f).tmp $(DESTDIR)$(HOOKSDIR)/$$(basename $$f) || exit 1; \
	done; fi
	@if [ -n "$(MANIFEST)" ]; then \
	    { cat $(STAGE)/created; \
	      if ! grep -q '^c ' $(STAGE)/created && [ -e $(DESTDIR)$(MANIFEST) ]; then grep '^c ' $(DESTDIR)$(MANIFEST); fi; \
	      for t in $(PYTHON_SITELIB)/mixed_cpus_hook $(PYTHON_SITELIB)/mixed_cpus_hook-$(VERSION).dist-info \
	               $(DATADIR)/$(NAME) $(DOCDIR) $(LICENSEDIR); do \
	          (cd $(DESTDIR)/ && find ".$$t" -type d | sed 's,^\.,d ,' && find ".$$t" ! -type d | sed 's,^\.,f ,'); done; \
	      for f in $(BINDIR)/$(NAME) $(addprefix $(UNITDIR)/,$(notdir $(MODE_UNITS))) $(addprefix $(PRESETDIR)/,$(MODE_PRESETS)) \
	               $(TMPFILESDIR)/$(NAME).conf $(MANDIR)/man8/$(NAME).8 $(BASHCOMPDIR)/$(NAME) $(ZSHCOMPDIR)/_$(NAME) \
	               $(if $(filter nri,$(MODE)),,$(HOOKSDIR)/$(NAME).json $(HOOKSDIR)/$(NAME)-release.json) $(MANIFEST); do \
	          echo "f $$f"; done; \
	    } | sort -u > $(STAGE)/manifest && $(INSTALL) -m 644 $(STAGE)/manifest $(DESTDIR)$(MANIFEST); fi
	@echo "make install: done ($(MODE) mode). Then, as root on the node (the README, \"Install\"):"; \
	echo "  systemd-tmpfiles --create $(TMPFILESDIR)/$(NAME).conf && systemctl daemon-reload && systemctl enable --now $(MODE_ENABLED)"

# `make uninstall` (same DESTDIR and DATADIR, or MANIFEST=...): stops nothing and disables nothing
# (see the README for the systemctl steps); removes the hooks.d files first (CRI-O must never see
# one whose executable is gone), then every file of the manifest, then its directories when they
# are empty. The configuration is kept when it was edited (like rpm's %config), and named.
uninstall:
	@m="$(DESTDIR)$(MANIFEST)"; test -n "$(MANIFEST)" && test -f "$$m" || { \
	    echo "make uninstall: no manifest at $$m: nothing was installed here by make install (with this DESTDIR, PREFIX or DATADIR)" >&2; exit 1; }; \
	list=$$(cat "$$m"); \
	printf '%s\n' "$$list" | grep '^f .*/hooks\.d/' | while read -r k p; do rm -f "$(DESTDIR)$$p"; done; \
	printf '%s\n' "$$list" | grep '^f ' | while read -r k p; do rm -f "$(DESTDIR)$$p"; done; \
	printf '%s\n' "$$list" | grep '^c ' | while read -r k p sum; do \
	    if [ "$$(sha256sum < "$(DESTDIR)$$p" 2>/dev/null | cut -d' ' -f1)" = "$$sum" ]; then rm -f "$(DESTDIR)$$p"; \
	    elif [ -e "$(DESTDIR)$$p" ]; then echo "make uninstall: kept $$p (edited since make install)"; fi; done; \
	printf '%s\n' "$$list" | grep '^d ' | cut -c3- | awk '{ print length, $$0 }' | sort -rn | cut -d' ' -f2- | \
	    while read -r p; do rmdir "$(DESTDIR)$$p" 2>/dev/null || true; done; \
	echo "make uninstall: removed what make install laid down (manifest $(MANIFEST))"

# rpm/90-mixed-cpus-hook.preset (hook mode) and rpm/90-mixed-cpus-hook-nri.preset (NRI mode): each
# enables its mode's non-template units with an [Install] section (tests/unit/test_machineconfig.py
# fails when they are out of date).
preset:
	PYTHONPATH=hook $(PYTHON) -c 'import sys; from mixed_cpus_hook.ops.machineconfig import preset_for_files; \
	    sys.stdout.write(preset_for_files(sys.argv[1:], "hook"))' $(HOOK_UNITS) > rpm/90-$(NAME).preset
	PYTHONPATH=hook $(PYTHON) -c 'import sys; from mixed_cpus_hook.ops.machineconfig import preset_for_files; \
	    sys.stdout.write(preset_for_files(sys.argv[1:], "nri"))' $(NRI_UNITS) > rpm/90-$(NAME)-nri.preset

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

# `make rpm`: the binary RPMs in $(DIST)/ (mixed-cpus-hook, -hook-mode, -nri-mode), with rpmbuild -bb. On a host whose package manager is not rpm
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
	@ls -1 $(DIST)/$(NAME)-$(VERSION)-*.rpm $(DIST)/$(NAME)-*-mode-$(VERSION)-*.rpm

# Unit tests on Python 3.9 with the oldest dependency versions we support: those of RHEL 9.
COMPAT_VENV ?= .venv-py39
COMPAT_PINS := click==7.1.2 jsonschema==3.2.0 PyYAML==5.4.1 psutil==5.8.0 protobuf==3.14.0 tomli==1.2.3
# venv and pip with a TMPDIR of their own, removed after them: Python 3.9's ensurepip runs pip from its wheel,
# which copies its certifi bundle to a temporary cacert.pem and leaves it behind in /tmp at every run.
PIP_OWN_TMP = tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && TMPDIR=$$tmp
$(COMPAT_VENV)/.stamp: setup.cfg pyproject.toml
	@test -n "$(PY39)" || { echo "test-compat: no python3.9 found; set PY39=/path/to/python3.9" >&2; exit 1; }
	rm -rf $(COMPAT_VENV)
	$(PIP_OWN_TMP) $(PY39) -m venv $(COMPAT_VENV)
	$(PIP_OWN_TMP) $(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check $(COMPAT_PINS) pytest pyfakefs prometheus_client vermin
	$(PIP_OWN_TMP) $(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

# What depends on the Python version (ruff's py39 rules, vermin); complexity is `make lint`'s.
lint-py39: venv $(COMPAT_VENV)/.stamp
	$(VENV)/bin/ruff check --target-version py39 --ignore C901 hook
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
