/* SPDX-License-Identifier: MIT */
/*
 * log.c - gw_log(): one line per event on stderr, "gradwire[rank]: ...".
 * A line is formatted into one buffer and written with a single write(2), so
 * lines of ranks sharing a terminal do not interleave mid-line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include "log.h"

void gw_log(int max, int level, int rank, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	char line[1024];
	va_list ap;
	int n;

	if (level > max)
		return;
	if (rank >= 0)
		n = snprintf(line, sizeof(line), "gradwire[%d]: %s: ", rank,
			     names[level < 0   ? 0
				   : level > 3 ? 3
					       : level]);
	else
		n = snprintf(line, sizeof(line), "gradwire[-]: %s: ",
			     names[level < 0   ? 0
				   : level > 3 ? 3
					       : level]);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return; /* nowhere left to report it */
}
