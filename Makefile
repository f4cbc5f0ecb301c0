# gpumux build, test and demo entry points. `make test` works on a fresh
# Debian 12 machine with Go, as root, from a clean clone: it installs the
# Debian packages it needs, builds Nomad from the Go module proxy (cached in
# $(GPUMUX_CACHE)), builds the binaries and runs unit and e2e tests.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
# A fresh machine may have Go in /usr/local/go/bin but not on PATH.
ifeq ($(shell command -v $(GO) 2>/dev/null),)
export PATH := $(PATH):/usr/local/go/bin
endif

# go-nvml's header marks NVML calls deprecated in CUDA 13; cgo would print a
# warning for each of them on every cold build.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

NOMAD_VERSION := 1.10.5
GPUMUX_CACHE ?= $(HOME)/.cache/gpumux
NOMAD_BIN ?= $(GPUMUX_CACHE)/nomad-v$(NOMAD_VERSION)/nomad
export GPUMUX_CACHE NOMAD_BIN

# The version and commit every binary reports (internal/version): a tag
# vX.Y.Z gives "X.Y.Z" ("X.Y.Z-N-gHASH" N commits later, "-dirty" with
# changes); a tree without one gives the release in internal/version/VERSION
# with "-dev".
RELEASE := $(shell cat internal/version/VERSION)
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//' | grep . || echo "$(RELEASE)-dev")
COMMIT ?= $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null || c=$$c-dirty; echo $$c; })
VERSION_PKG := github.com/gpumux/gpumux/internal/version
VERSION := $(VERSION)
COMMIT := $(COMMIT)
GO_LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT)

BIN_DIR := bin
# Nomad loads every file in plugin_dir as a plugin, so the device plugin
# lives alone in bin/plugins; the other commands go to bin/.
PLUGIN_DIR := $(BIN_DIR)/plugins
PLUGIN := nomad-device-gpumux
# Read by e2e/nomadagent.DefaultPluginDir.
export GPUMUX_PLUGIN_DIR := $(abspath $(PLUGIN_DIR))
# A missing plugin binary is an error (set 0 to build a tree without it).
REQUIRE_PLUGIN ?= 1
# STRIPPED=1 (the release builds of make dist and make deb): the Go
# binaries are linked without their symbol table and DWARF (-s -w), the C
# libraries and nvidia-smi stripped with $(STRIP) after they are built.
STRIPPED ?= 0
STRIP ?= strip
GO_BUILD_LDFLAGS := $(if $(filter 1,$(STRIPPED)),-s -w )$(GO_LDFLAGS)

UNIT_TIMEOUT ?= 20m
E2E_TIMEOUT ?= 40m
# e2e packages run one at a time (-p 1): all Nomad agents on a host share
# the /nomad cgroups (v1) and the machine has 2 cores.
E2E_FLAGS ?= -v

.PHONY: all build interposer remote-nvml nomad containerd2 docker-cdi deps test test-unit test-e2e bench demo gpu-bin engine-bin clean fmt vet install dist dist-all deb version

all: build

## build: go build every command under cmd/ into bin/, the plugin into bin/plugins/, gpumux-runtime (C), the interposer and its NVML, the limiter
build: entry interposer remote-nvml limiter
	@mkdir -p $(BIN_DIR) $(PLUGIN_DIR)
	@pkgs="$$($(GO) list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./cmd/...)"; \
	if [[ -z "$$pkgs" ]]; then \
		echo "build: no commands under cmd/ yet"; \
	else \
		echo "build:" $$pkgs; \
		$(GO) build -ldflags '$(GO_BUILD_LDFLAGS)' -o $(BIN_DIR)/ $$pkgs; \
	fi
	@if [[ -f $(BIN_DIR)/$(PLUGIN) ]]; then \
		mv -f $(BIN_DIR)/$(PLUGIN) $(PLUGIN_DIR)/$(PLUGIN); \
		echo "build: plugin at $(PLUGIN_DIR)/$(PLUGIN)"; \
	elif [[ "$(REQUIRE_PLUGIN)" == 1 ]]; then \
		echo "build: ERROR: cmd/$(PLUGIN) did not produce a binary" >&2; exit 1; \
	else \
		echo "build: WARNING: cmd/$(PLUGIN) not present yet; no plugin built"; \
	fi
	@if [[ "$(STRIPPED)" == 1 ]]; then \
		echo "build: $(STRIP) --strip-unneeded $(C_OUTS)"; \
		$(STRIP) --strip-unneeded $(C_OUTS); \
	fi

# gpumux-runtime: the runtime entry every runc call of every container goes
# through (cmd/gpumux-runtime), a static C program that only routes: to
# runc, to gpumux-runtime-core (a create that may ask for GPUs) or to
# gpumux-runtime-hook, both Go and installed beside it. Its version is the
# build's; the stamp file makes a new version rebuild it.
ENTRY_SRC := cmd/gpumux-runtime/gpumux-runtime.c
ENTRY_OUT ?= $(BIN_DIR)/gpumux-runtime
ENTRY_STAMP := $(BIN_DIR)/.gpumux-runtime.version
ENTRY_CFLAGS ?= -std=gnu11 -O2 -Wall -Wextra -Werror
ENTRY_LDFLAGS ?= -static

.PHONY: entry FORCE
## entry: build gpumux-runtime (C) into $(ENTRY_OUT) with the system C compiler ($(CC))
entry: $(ENTRY_OUT)

$(ENTRY_STAMP): FORCE
	@mkdir -p $(@D)
	@v='$(VERSION) (commit $(COMMIT))'; [[ -f $@ && "$$(cat $@)" == "$$v" ]] || echo "$$v" >$@

$(ENTRY_OUT): $(ENTRY_SRC) $(ENTRY_STAMP)
	@command -v $(CC) >/dev/null 2>&1 || { echo "entry: no C compiler ($(CC)); run 'make deps' or set CC" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(ENTRY_CFLAGS) -DGPUMUX_VERSION='"$(VERSION) (commit $(COMMIT))"' -o $@.tmp $(ENTRY_SRC) $(ENTRY_LDFLAGS)
	@mv -f $@.tmp $@

# The interposer: the C library installed as libcuda.so.1 in containers
# that use a remote GPU (remote/interposer). C only, no toolkit needed;
# only its GM_EXPORT symbols (the CUDA driver API) are exported.
INTERPOSER_DIR := remote/interposer
INTERPOSER_OUT ?= $(BIN_DIR)/remote/libcuda.so.1
INTERPOSER_SRCS := $(sort $(wildcard $(INTERPOSER_DIR)/*.c))
INTERPOSER_HDRS := $(sort $(wildcard $(INTERPOSER_DIR)/*.h))
INTERPOSER_CFLAGS ?= -std=gnu11 -fPIC -O2 -g -Wall -Wextra -Werror -fvisibility=hidden
INTERPOSER_LDFLAGS ?= -shared -Wl,-soname,libcuda.so.1 -Wl,-z,defs -Wl,-z,now -Wl,-z,text -Wl,--exclude-libs,ALL -lpthread
# The interposer's TLS client (gm_tls.c) is BearSSL (Debian: libbearssl-dev),
# linked statically: the interposer runs in any container, whatever its
# libssl. --exclude-libs keeps BearSSL's symbols out of libcuda.so.1's.
BEARSSL_LIBS ?= -l:libbearssl.a
# More flags, e.g. -fsanitize=address,undefined (remote/ctest's GM_CTEST_SANITIZE).
INTERPOSER_EXTRA_CFLAGS ?=

## interposer: build the interposer into $(INTERPOSER_OUT) with the system C compiler ($(CC))
interposer: $(INTERPOSER_OUT)

$(INTERPOSER_OUT): $(INTERPOSER_SRCS) $(INTERPOSER_HDRS)
	@command -v $(CC) >/dev/null 2>&1 || { echo "interposer: no C compiler ($(CC)); run 'make deps' or set CC" >&2; exit 1; }
	@mkdir -p $(@D)
	@printf '#include <bearssl.h>\n' | $(CC) -E -x c - >/dev/null 2>&1 || { echo "interposer: no BearSSL headers (bearssl.h); run 'make deps' (Debian package libbearssl-dev)" >&2; exit 1; }
	$(CC) $(INTERPOSER_CFLAGS) $(INTERPOSER_EXTRA_CFLAGS) -o $@.tmp $(INTERPOSER_SRCS) $(BEARSSL_LIBS) $(INTERPOSER_LDFLAGS)
	@mv -f $@.tmp $@

# The NVML library of remote shares: libnvidia-ml.so.1 next to the
# interposer (remote/nvml), answering through it for the share; with a
# libnvidia-ml.so link for programs that load the unversioned name. C only;
# only NVML's functions are exported.
NVML_DIR := remote/nvml
NVML_OUT ?= $(BIN_DIR)/remote/libnvidia-ml.so.1
NVML_SRCS := $(sort $(wildcard $(NVML_DIR)/*.c))
NVML_HDRS := $(sort $(wildcard $(NVML_DIR)/*.h)) $(INTERPOSER_DIR)/gm_abi.h $(INTERPOSER_DIR)/gm_share.h
NVML_CFLAGS ?= -std=gnu11 -fPIC -O2 -g -Wall -Wextra -Werror -fvisibility=hidden -I$(INTERPOSER_DIR)
NVML_LDFLAGS ?= -shared -Wl,-soname,libnvidia-ml.so.1 -Wl,-z,defs -Wl,-z,now -ldl -lpthread
# More flags, e.g. -fsanitize=address,undefined (remote/ctest's GM_CTEST_SANITIZE).
NVML_EXTRA_CFLAGS ?=

# Its nvidia-smi (remote/nvml/smi), beside it; it finds the library on
# LD_LIBRARY_PATH or where containers have it (remote.Mount).
SMI_OUT := $(dir $(NVML_OUT))nvidia-smi
SMI_SRCS := $(NVML_DIR)/smi/nvidia-smi.c
SMI_CFLAGS ?= -std=gnu11 -O2 -g -Wall -Wextra -Werror -I$(NVML_DIR)

## remote-nvml: build the NVML library of remote shares into $(NVML_OUT) (and a libnvidia-ml.so link beside it), and its nvidia-smi
remote-nvml: $(NVML_OUT) $(SMI_OUT)

$(SMI_OUT): $(SMI_SRCS) $(NVML_DIR)/nvml_abi.h $(NVML_OUT)
	$(CC) $(SMI_CFLAGS) $(NVML_EXTRA_CFLAGS) -o $@.tmp $(SMI_SRCS) -L$(@D) -l:$(notdir $(NVML_OUT)) -Wl,-rpath,/run/gpumux/remote
	@mv -f $@.tmp $@

$(NVML_OUT): $(NVML_SRCS) $(NVML_HDRS)
	@command -v $(CC) >/dev/null 2>&1 || { echo "remote-nvml: no C compiler ($(CC)); run 'make deps' or set CC" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(NVML_CFLAGS) $(NVML_EXTRA_CFLAGS) -o $@.tmp $(NVML_SRCS) $(NVML_LDFLAGS)
	@mv -f $@.tmp $@
	@ln -sfn $(@F) $(@D)/libnvidia-ml.so

# The limiter: the libcuda.so.1 and libnvidia-ml.so.1 of time-slice
# replicas (timeslice/limiter), in front of the real driver's. C only, no
# toolkit needed; only the real libraries' API is exported.
LIMITER_DIR := timeslice/limiter
LIMITER_OUT_DIR ?= $(BIN_DIR)/limiter
LIMITER_COMMON := $(sort $(wildcard $(LIMITER_DIR)/lim_*.c))
LIMITER_CUDA_SRCS := $(LIMITER_COMMON) $(sort $(wildcard $(LIMITER_DIR)/cuda_*.c)) $(LIMITER_DIR)/zz_cuda.c
LIMITER_NVML_SRCS := $(LIMITER_COMMON) $(sort $(wildcard $(LIMITER_DIR)/nvml_*.c)) $(LIMITER_DIR)/zz_nvml.c
LIMITER_HDRS := $(sort $(wildcard $(LIMITER_DIR)/*.h)) $(INTERPOSER_DIR)/gm_abi.h $(NVML_DIR)/nvml_abi.h
LIMITER_CFLAGS ?= -std=gnu11 -fPIC -O2 -g -Wall -Wextra -Werror -fvisibility=hidden
LIMITER_LDFLAGS ?= -shared -Wl,-z,defs -Wl,-z,now -ldl -lpthread
# More flags, e.g. -fsanitize=address,undefined (timeslice/ctest's GM_CTEST_SANITIZE).
LIMITER_EXTRA_CFLAGS ?=

.PHONY: limiter
## limiter: build the limiter into $(LIMITER_OUT_DIR) (libcuda.so.1, libnvidia-ml.so.1) with the system C compiler ($(CC))
limiter: $(LIMITER_OUT_DIR)/libcuda.so.1 $(LIMITER_OUT_DIR)/libnvidia-ml.so.1

$(LIMITER_OUT_DIR)/libcuda.so.1: $(LIMITER_CUDA_SRCS) $(LIMITER_HDRS)
	@command -v $(CC) >/dev/null 2>&1 || { echo "limiter: no C compiler ($(CC)); run 'make deps' or set CC" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(LIMITER_CFLAGS) $(LIMITER_EXTRA_CFLAGS) -o $@.tmp $(LIMITER_CUDA_SRCS) -Wl,-soname,libcuda.so.1 $(LIMITER_LDFLAGS)
	@mv -f $@.tmp $@

$(LIMITER_OUT_DIR)/libnvidia-ml.so.1: $(LIMITER_NVML_SRCS) $(LIMITER_HDRS)
	@command -v $(CC) >/dev/null 2>&1 || { echo "limiter: no C compiler ($(CC)); run 'make deps' or set CC" >&2; exit 1; }
	@mkdir -p $(@D)
	$(CC) $(LIMITER_CFLAGS) $(LIMITER_EXTRA_CFLAGS) -o $@.tmp $(LIMITER_NVML_SRCS) -Wl,-soname,libnvidia-ml.so.1 $(LIMITER_LDFLAGS)
	@mv -f $@.tmp $@

# What the C rules build (STRIPPED=1 strips them).
C_OUTS = $(ENTRY_OUT) $(INTERPOSER_OUT) $(NVML_OUT) $(SMI_OUT) $(LIMITER_OUT_DIR)/libcuda.so.1 $(LIMITER_OUT_DIR)/libnvidia-ml.so.1

# make install: where each piece goes. PREFIX=/usr is the Debian
# package's layout, which nodeconfig's defaults (interposer_dir,
# limiter_dir: /usr/lib/gpumux/...) expect; elsewhere set them in the node
# config (docs/install.md).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
GPUMUX_LIBDIR ?= $(PREFIX)/lib/gpumux
# Nomad loads every file in its plugin_dir as a plugin: a directory of
# plugins only, which the client's plugin_dir names (docs/install.md).
NOMAD_PLUGIN_DIR ?= $(PREFIX)/lib/nomad/plugins
SYSTEMD_UNIT_DIR ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
DOCDIR ?= $(PREFIX)/share/doc/gpumux
SYSTEMD_UNITS := $(sort $(wildcard examples/systemd/*.service))

## install: install the binaries, the interposer, the limiter, the plugin, systemd units (not enabled) and examples under $(DESTDIR)$(PREFIX)
install: build
	install -d -m 755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(GPUMUX_LIBDIR)/remote $(DESTDIR)$(GPUMUX_LIBDIR)/limiter \
		$(DESTDIR)$(NOMAD_PLUGIN_DIR) $(DESTDIR)$(SYSTEMD_UNIT_DIR) $(DESTDIR)$(DOCDIR)
	install -m 755 $(BIN_DIR)/gpumux $(BIN_DIR)/gpumux-runtime $(BIN_DIR)/gpumux-runtime-core $(BIN_DIR)/gpumux-runtime-hook $(BIN_DIR)/gpumux-remoted $(DESTDIR)$(BINDIR)/
	install -m 755 $(PLUGIN_DIR)/$(PLUGIN) $(DESTDIR)$(NOMAD_PLUGIN_DIR)/
	install -m 644 $(INTERPOSER_OUT) $(NVML_OUT) $(DESTDIR)$(GPUMUX_LIBDIR)/remote/
	ln -sfn libnvidia-ml.so.1 $(DESTDIR)$(GPUMUX_LIBDIR)/remote/libnvidia-ml.so
	install -m 755 $(SMI_OUT) $(DESTDIR)$(GPUMUX_LIBDIR)/remote/
	install -m 644 $(LIMITER_OUT_DIR)/libcuda.so.1 $(LIMITER_OUT_DIR)/libnvidia-ml.so.1 $(DESTDIR)$(GPUMUX_LIBDIR)/limiter/
	@# The units name /usr/bin's binaries: point them at $(BINDIR).
	for u in $(SYSTEMD_UNITS); do \
		sed 's|/usr/bin/|$(BINDIR)/|g' "$$u" >$(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$(basename "$$u"); \
		chmod 644 $(DESTDIR)$(SYSTEMD_UNIT_DIR)/$$(basename "$$u"); \
	done
	rm -rf $(DESTDIR)$(DOCDIR)/examples
	cp -R examples $(DESTDIR)$(DOCDIR)/examples
	find $(DESTDIR)$(DOCDIR)/examples -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +
	install -m 644 README.md docs/install.md $(DESTDIR)$(DOCDIR)/

# make dist: a tarball and a Debian package for one architecture, DIST_ARCH
# (amd64 or arm64; this machine's by default); make dist-all: one of each.
# The Go binaries use cgo (go-nvml) and the interposer, the limiter and the
# remote NVML are C, so the other architecture's release is built with
# Debian's cross C toolchain (TRIPLET-gcc and TRIPLET-strip, the GNU
# triplets below) and BearSSL for that architecture (multiarch
# libbearssl-dev:ARCH); scripts/install-deps.sh installs them. A release is
# built, stripped, in bin/linux-ARCH/: kept between builds, and apart from
# make build's bin/, which tests use.
DIST_DIR ?= dist
HOST_ARCH := $(shell $(GO) env GOHOSTARCH)
DIST_ARCH ?= $(HOST_ARCH)
DIST_ARCHES := amd64 arm64
DIST_TRIPLET_amd64 := x86_64-linux-gnu
DIST_TRIPLET_arm64 := aarch64-linux-gnu
DIST_TRIPLET := $(DIST_TRIPLET_$(DIST_ARCH))
DIST_BIN_DIR := $(BIN_DIR)/linux-$(DIST_ARCH)
DIST_CC := $(if $(filter $(HOST_ARCH),$(DIST_ARCH)),$(CC),$(DIST_TRIPLET)-gcc)
DIST_STRIP := $(if $(filter $(HOST_ARCH),$(DIST_ARCH)),$(STRIP),$(DIST_TRIPLET)-strip)
# make, for DIST_ARCH's release build.
DIST_MAKE = GOOS=linux GOARCH=$(DIST_ARCH) CGO_ENABLED=1 $(MAKE) --no-print-directory \
	BIN_DIR=$(DIST_BIN_DIR) CC=$(DIST_CC) STRIP=$(DIST_STRIP) STRIPPED=1
DIST_NAME := gpumux-$(VERSION)-linux-$(DIST_ARCH)
DIST_ROOT := $(DIST_DIR)/$(DIST_NAME)
# Debian's spelling of VERSION: 0.1.0~dev sorts before 0.1.0, 0.1.0+3.gHASH
# (3 commits after v0.1.0) after it.
DEB_VERSION := $(shell echo '$(VERSION)' | sed -E 's/-dev$$/~dev/; s/-([0-9]+)-g([0-9a-f]+)/+\1.g\2/; s/-dirty$$/+dirty/')
DEB := $(DIST_DIR)/gpumux_$(DEB_VERSION)_$(DIST_ARCH).deb
# nfpm builds the package (packaging/nfpm.yaml). v2.45.0: later versions'
# command needs modules (go.digitalxero.dev/...) the Go module proxy refuses.
NFPM ?= $(GO) run github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.0

## version: print the version, the commit and the Debian version the build stamps
version:
	@echo '$(VERSION) $(COMMIT) $(DEB_VERSION)'

## dist: dist/gpumux-VERSION-linux-ARCH.tar.gz (every piece, README saying which goes where) and the Debian package, for DIST_ARCH (default: this machine's)
dist: deb
	rm -rf $(DIST_ROOT)
	$(DIST_MAKE) install DESTDIR=$(abspath $(DIST_ROOT))/root PREFIX=/usr
	install -m 644 packaging/README.md $(DIST_ROOT)/README.md
	tar -C $(DIST_DIR) --owner=root:0 --group=root:0 -czf $(DIST_DIR)/$(DIST_NAME).tar.gz $(DIST_NAME)
	@echo "dist: $(DIST_DIR)/$(DIST_NAME).tar.gz $(DEB)"

## dist-all: make dist for each of $(DIST_ARCHES)
dist-all:
	for a in $(DIST_ARCHES); do $(MAKE) --no-print-directory dist DIST_ARCH=$$a; done

## deb: the Debian package $(DEB), with the files make install PREFIX=/usr installs, for DIST_ARCH
deb:
	@[[ -n "$(DIST_TRIPLET)" ]] || { echo "deb: DIST_ARCH=$(DIST_ARCH): not one of $(DIST_ARCHES)" >&2; exit 1; }
	rm -rf $(DIST_DIR)/deb-root
	$(DIST_MAKE) install DESTDIR=$(abspath $(DIST_DIR))/deb-root PREFIX=/usr
	cd $(DIST_DIR) && GPUMUX_DEB_VERSION='$(DEB_VERSION)' GPUMUX_DEB_ARCH=$(DIST_ARCH) \
		$(NFPM) package --config $(abspath packaging/nfpm.yaml) --packager deb --target $(abspath $(DEB))
	rm -rf $(DIST_DIR)/deb-root

## nomad: build the Nomad agent (v$(NOMAD_VERSION)) into $(GPUMUX_CACHE) if needed
nomad:
	scripts/build-nomad.sh

## containerd2: build containerd 2.x and its runc (for the CDI and NRI e2e tests) into $(GPUMUX_CACHE) if needed
containerd2:
	scripts/build-containerd.sh

## engine-bin: pack the containerd and Docker benchmarks (test binary, probe, containerd 1.6 and 2.x, this build's binaries; Docker 26 and Debian's 20.10 apart) into .devbin/engines.tar.xz and .devbin/docker.tar.xz, to run on a GPU machine (docs/benchmarks.md)
engine-bin: build
	GO_BUILD_LDFLAGS='$(GO_LDFLAGS)' scripts/pack-engines.sh

## docker-cdi: fetch Docker 26 (Debian 13's packages, for the e2e tests of Docker's CDI path) into $(GPUMUX_CACHE) if needed
docker-cdi:
	scripts/fetch-docker.sh

## deps: install missing Debian packages (gcc, libc6-dev, make, ...)
deps:
	scripts/install-deps.sh

## test: unit tests (race) then e2e tests against a real Nomad dev agent
test: deps nomad containerd2 docker-cdi build
	$(MAKE) --no-print-directory test-unit
	$(MAKE) --no-print-directory test-e2e

test-unit:
	$(GO) test -race -timeout $(UNIT_TIMEOUT) ./...

test-e2e:
	@test -x "$(NOMAD_BIN)" || { echo "test-e2e: $(NOMAD_BIN) missing; run 'make nomad'" >&2; exit 1; }
	@[[ $$(id -u) == 0 ]] || { echo "test-e2e: must run as root (Nomad exec driver)" >&2; exit 1; }
	@log=$$(mktemp -t gpumux-e2e.XXXXXX.log); rc=0; \
	  echo "$(GO) test -tags 'e2e no_dynamic_plugins' -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(E2E_FLAGS) ./e2e/... (output also in $$log)"; \
	  $(GO) test -tags 'e2e no_dynamic_plugins' -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(E2E_FLAGS) ./e2e/... 2>&1 | tee "$$log" || rc=$$?; \
	  if (( rc )); then scripts/test-failures "$$log"; fi; exit $$rc

## bench: all benchmarks
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## demo: Nomad dev agent + plugin on a simulated 8×H200 node running examples/jobs (root)
demo: deps nomad build
	scripts/demo.sh

## gpu-bin: GPU-tagged test binaries, the CLI and gpumux-remoted in .devbin/ (and the interposer and its NVML in bin/remote), to run on a GPU machine (docs/validation.md)
gpu-bin: interposer remote-nvml
	@mkdir -p .devbin
	$(GO) test -c -tags gpu -ldflags='-s -w' -o .devbin/gpu.test ./gpu/
	$(GO) test -c -tags gpu -ldflags='-s -w' -o .devbin/plugin.test ./plugin/
	$(GO) test -c -tags gpu -ldflags='-s -w' -o .devbin/mps.test ./mps/
	$(GO) build -ldflags='-s -w' -o .devbin/gpumux-fake-mps-control ./cmd/gpumux-fake-mps-control
	$(GO) build -ldflags='-s -w' -o .devbin/gpumux ./cmd/gpumux
	$(MAKE) --no-print-directory entry ENTRY_OUT=.devbin/gpumux-runtime ENTRY_STAMP=.devbin/.gpumux-runtime.version
	$(GO) build -ldflags='-s -w' -o .devbin/gpumux-runtime-hook ./cmd/gpumux-runtime-hook
	$(GO) build -ldflags='-s -w' -o .devbin/gpumux-runtime-core ./cmd/gpumux-runtime-core
	$(GO) build -ldflags='-s -w' -o .devbin/gpumux-remoted ./cmd/gpumux-remoted
	$(GO) test -c -tags gpu -ldflags='-s -w' -o .devbin/cudabackend.test ./remote/cudabackend/
	$(GO) build -ldflags='-s -w' -o .devbin/nomad-device-gpumux ./cmd/nomad-device-gpumux
	@if [[ -x "$(NOMAD_BIN)" ]]; then xz -T0 -c "$(NOMAD_BIN)" >.devbin/nomad.xz; \
	else echo "gpu-bin: no $(NOMAD_BIN) (make nomad): e2e/gpu/remote/nomad.sh needs .devbin/nomad.xz"; fi

clean:
	rm -rf $(BIN_DIR) .devbin $(DIST_DIR)

fmt:
	@files="$$(find . -name '*.go' -not -path './.git/*' -not -path './.cache/*')"; \
	if [[ -n "$$files" ]]; then gofmt -s -w $$files; fi

vet:
	$(GO) vet ./...
	$(GO) vet -tags 'e2e no_dynamic_plugins' ./...
