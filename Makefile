# dpwin — PGXS build
#
#   make && make install          build and install the extension
#   make installcheck             pg_regress suite, isolation specs and TAP
#                                 tests against a running sandbox
#                                 (see test/sandbox.sh)
#   make dist                     dpwin-<version>.zip for PGXN

EXTENSION = dpwin
# The version of the SQL objects this tree installs.  dpwin.control's
# default_version and META.json must say the same (make dist checks).
EXTVERSION = 0.2.0

MODULE_big = dpwin
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard src/*.c)))

# The extension script is assembled from one file per capability so that
# each capability's SQL sits next to its own concerns.
DATA_built = $(EXTENSION)--$(EXTVERSION).sql
INSTALL_PARTS = $(sort $(wildcard sql/install/*.sql))
# Released versions' scripts, frozen as they were released, and the update
# scripts between versions: every catalog change ships with one.
DATA = $(sort $(wildcard sql/versions/$(EXTENSION)--*.sql))

CURL_CONFIG ?= curl-config
PG_CPPFLAGS = -I$(srcdir)/src $(shell $(CURL_CONFIG) --cflags)
# -Wextra with PostgreSQL: fmgr calling convention (PG_FUNCTION_ARGS) and
# server headers leave parameters unused by design.
PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter
SHLIB_LINK = $(shell $(CURL_CONFIG) --libs) -lcrypto

REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --inputdir=$(srcdir) --outputdir=$(CURDIR)

ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=$(srcdir)/test/isolation --outputdir=$(CURDIR)/output_iso

TAP_SUITE = $(sort $(wildcard test/t/*.t))

EXTRA_CLEAN = output_iso


PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PostgreSQL 16 and later build modules with -fvisibility=hidden, so only
# the entry points and the surface declared PGDLLEXPORT (the workers' entry
# points, what the test module calls) leave dpwin.so.  15 does not; there a
# linker version script keeps every name but PostgreSQL's entry points and
# dpwin_* inside.
ifeq ($(CFLAGS_SL_MODULE),)
SHLIB_LINK += -Wl,--version-script=$(srcdir)/src/exports.map
endif

# PGXS tracks no header dependencies: a changed header rebuilds every object.
$(OBJS): $(wildcard $(srcdir)/src/*.h)

$(EXTENSION)--$(EXTVERSION).sql: $(INSTALL_PARTS)
	cat $^ > $@

# The release archive for PGXN: the committed tree at HEAD, with the
# versions of dpwin.control, META.json and this file checked equal first.
.PHONY: dist versioncheck
versioncheck:
	@control=$$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" $(srcdir)/$(EXTENSION).control); \
	meta=$$(sed -n 's/^   "version": "\(.*\)",*$$/\1/p' $(srcdir)/META.json); \
	if [ "$$control" != "$(EXTVERSION)" ] || [ "$$meta" != "$(EXTVERSION)" ]; then \
		echo "version mismatch: Makefile $(EXTVERSION), $(EXTENSION).control '$$control', META.json '$$meta'" >&2; \
		exit 1; \
	fi
dist: versioncheck
	git -C $(srcdir) archive --format zip --prefix=$(EXTENSION)-$(EXTVERSION)/ \
		-o $(CURDIR)/$(EXTENSION)-$(EXTVERSION).zip HEAD

.PHONY: regresscheck isolationcheck tapcheck
regresscheck:
	$(pg_regress_installcheck) $(REGRESS_OPTS) $(REGRESS)
isolationcheck:
ifneq ($(ISOLATION),)
	$(pg_isolation_regress_installcheck) $(ISOLATION_OPTS) $(ISOLATION)
endif
# The TAP suite talks to the sandbox (test/sandbox.sh env), not to a
# temporary installation, so it runs with the caller's environment.
tapcheck:
	prove -I $(srcdir)/test/lib $(TAP_SUITE)

installcheck: tapcheck
