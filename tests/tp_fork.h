/* SPDX-License-Identifier: MIT */
/*
 * tp_fork.h - fork ranks for multi-process tests (tp_fork.c); needs nothing
 * of gradwire. tp_harness.h adds the transport helpers on top.
 *
 * tp_run() forks `size` ranks that share a fresh file-store folder
 * (mkdtemp, removed afterwards). Each child arms alarm() so it dies rather
 * than hang, runs its body and exits with the body's return value; the
 * parent reaps every child by a deadline and SIGKILLs stragglers. A child
 * killed by signal s reports 128 + s, after writing its stack to stderr
 * (tp_trace_crashes()); in a sanitizer build, a child whose body succeeded
 * but leaked memory reports TP_LEAKED.
 */
#ifndef GW_TP_FORK_H
#define GW_TP_FORK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TP_MAX_RANKS 8

typedef int (*tp_body)(int rank, int size, const char *dir, void *arg);

/* Exit code of a rank whose body succeeded but leaked (sanitizer builds). */
#define TP_LEAKED 99

/* FI_TCP_IFACE, FI_NET_IFACE and FI_SOCKETS_IFACE = "lo" for this process
 * and its children. */
void tp_pin_loopback(void);
/* From now on a crash (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) writes
 * the stack to stderr before the process dies of it, unless a sanitizer
 * handles the signal. tp_run()'s ranks call it; a test that forks its own
 * ranks calls it in each. */
void tp_trace_crashes(void);
/* Remove the shm regions (/dev/shm/gw-<pid>-*) that the dead process pid
 * left open: a rank that was killed, or crashed, keeps them otherwise.
 * tp_run() does it for its ranks. */
void tp_forget_regions(pid_t pid);
/* How many shm regions of process pid are named in /dev/shm. */
int tp_named_regions(pid_t pid);
/* Make pid's shm regions look age_s seconds old (their modification time);
 * returns how many there are. */
int tp_age_regions(pid_t pid, int age_s);
/* Give path a modification time age_s seconds ago; 0 or -1 (errno). */
int tp_age_file(const char *path, int age_s);
/* Fork size ranks running body; codes[r] = exit code. Return: 0, or -errno
 * when the harness itself failed. */
int tp_run(int size, int limit_s, tp_body body, void *arg, int *codes);
/* FNV-1a of p[0..len): ranks compare their results' bits through it. */
uint64_t tp_hash(const void *p, size_t len);

#endif
