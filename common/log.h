/* SPDX-License-Identifier: MIT */
/*
 * log.h - gw_log(), the one way every layer reports an event (log.c).
 */
#ifndef GW_LOG_H
#define GW_LOG_H

enum gw_log_level {
	GW_LOG_ERROR = 0,
	GW_LOG_WARN = 1,
	GW_LOG_INFO = 2,
	GW_LOG_DEBUG = 3,
};

/**
 * gw_log() - one line on stderr, "gradwire[rank]: text", when level <= max.
 * @max: the configured verbosity (struct gw_tp_cfg.log_level).
 * @rank: the rank the line is about (-1: not known yet).
 */
void gw_log(int max, int level, int rank, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
