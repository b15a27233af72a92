# The goshim launcher (tools/*.c) and its man page (tools/goshim.1).
# Included by the Makefile before its rules: LIBGOSHIM, BUILD, VERSION, msg and Q are
# set, STAMP is not yet, hence $(BUILD)/.flags spelt out (prerequisites expand at once).
#
#   build/goshim      the launcher: goshim run | compare | stress | trace-plot (see goshim(1));
#                     goshim.c (main, the command table), a cmd_*.c file per command
#                     (launcher.h declares them) and the parts they share: cli.c, library.c,
#                     measure.c, gnuplot.c and schedtrace.c, each with its header
#   build/goshim.1    the man page, with the version filled in
#   make install-tools    bin/goshim, lib/libgoshim.so (where the launcher looks: ../lib
#                         from its own directory), share/man/man1/goshim.1 and the gdb
#                         helper share/goshim/goshim-gdb.py (gdb: source it) under
#                         $(DESTDIR)$(PREFIX); make uninstall-tools removes them.

GOSHIM_BIN := $(BUILD)/goshim
GOSHIM_MAN := $(BUILD)/goshim.1
TOOLS      += $(GOSHIM_BIN) $(GOSHIM_MAN)

$(BUILD)/tools/%.o: tools/%.c $(BUILD)/.flags
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BASE) $(WARN) $(CFLAGS) $(SANFLAGS) -c -o $@ $<

GOSHIM_OBJ := $(patsubst tools/%.c,$(BUILD)/tools/%.o,$(wildcard tools/*.c))
# The pure parts the unit binary links and tests directly (tests/test_schedtrace.c).
TOOLS_UNIT_OBJ := $(BUILD)/tools/schedtrace.o

$(GOSHIM_BIN): $(GOSHIM_OBJ)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(SANFLAGS) $(LDFLAGS) -o $@ $^

$(GOSHIM_MAN): tools/goshim.1 $(BUILD)/.flags
	$(call msg,GEN,$@)
	@mkdir -p $(@D)
	$(Q)sed 's/@VERSION@/$(VERSION)/g' $< > $@.tmp && mv $@.tmp $@

.PHONY: install-tools uninstall-tools

install-tools: $(GOSHIM_BIN) $(GOSHIM_MAN) $(LIBGOSHIM)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 0755 $(GOSHIM_BIN) $(DESTDIR)$(PREFIX)/bin/goshim
	install -m 0755 $(LIBGOSHIM) $(DESTDIR)$(PREFIX)/lib/libgoshim.so
	install -m 0644 $(GOSHIM_MAN) $(DESTDIR)$(PREFIX)/share/man/man1/goshim.1
	install -d $(DESTDIR)$(PREFIX)/share/goshim
	install -m 0644 tools/goshim-gdb.py $(DESTDIR)$(PREFIX)/share/goshim/goshim-gdb.py

uninstall-tools:
	rm -f $(DESTDIR)$(PREFIX)/bin/goshim $(DESTDIR)$(PREFIX)/lib/libgoshim.so \
	    $(DESTDIR)$(PREFIX)/share/man/man1/goshim.1 $(DESTDIR)$(PREFIX)/share/goshim/goshim-gdb.py
	-rmdir $(DESTDIR)$(PREFIX)/share/goshim 2>/dev/null

-include $(wildcard $(BUILD)/tools/*.d)
