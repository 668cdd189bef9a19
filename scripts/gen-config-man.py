#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes the shardx-config(7) man page from `sx_info --json` on stdin.

The parameter list comes from the library's own table (src/common/config.h,
through sx_info), so the page cannot fall out of step with the code. The
build runs this; the page is installed by `cmake --install`.
"""
import json
import sys


def roff(text):
    """Escapes text for a roff line: backslashes, and a leading dot or quote."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    if text.startswith((".", "'")):
        text = "\\&" + text
    return text


def main():
    info = json.load(sys.stdin)
    out = sys.stdout
    out.write('.TH SHARDX-CONFIG 7 "2026" "shardx %s" "shardx manual"\n' % info["version"])
    out.write(".SH NAME\nshardx-config \\- configuration variables of the shardx library\n")
    out.write(""".SH DESCRIPTION
Every tunable of shardx is a parameter with a name, a type, a default and
a range or word list. An engine reads each one from the engine parameters
given to
.B sx_engine_create()
(field
.BR config ),
then from the environment variable
.BI SX_ NAME\\fR,
then takes its default. An invalid value makes
.B sx_engine_create()
fail with
.B SX_ERR_INVALID_PARAM
and a log line naming the variable, the value and what is allowed; an
unknown
.B SX_*
variable draws a warning that names the closest known one.
.PP
Types:
.B uint
(decimal, or hexadecimal with 0x),
.B size
(a byte count with an optional k, m or g suffix, powers of 1024),
.B double,
.B bool
(1/0, yes/no, on/off, true/false),
.B enum
(one word of the list) and
.B string.
.PP
.BR sx_info (1)
prints the same table; docs/tuning.md in the source says which
parameters matter for performance, docs/debugging.md which help find a
hang or a loss.
.SH VARIABLES
.\\" Long values (fault specs) cannot be justified: set ragged right.
.ad l
""")
    for p in info["parameters"]:
        out.write(".TP\n.B %s\n" % p["env"])
        default = p["default"] if p["default"] != "" else "(empty)"
        allowed = p["allowed"].replace("|", ", ")
        out.write("%s; default %s; allowed: %s.\n" % (p["type"], roff(default), roff(allowed)))
        out.write(".br\n%s\n" % roff(p["description"]))
    out.write(""".SH EXAMPLES
.nf
SX_SHARDS=4 SX_LOG_LEVEL=info ./app
SX_WATCHDOG_S=60 SX_DUMP_SIGNAL=10 sx_run \\-n 8 ./app
SX_FAULT=loss=0.01,seed=7 sx_bench rate
.fi
.SH SEE ALSO
.BR sx_info (1),
.BR sx_run (1),
.BR sx_bench (1)
""")


if __name__ == "__main__":
    main()
