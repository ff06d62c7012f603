/* SPDX-License-Identifier: MIT */
/*
 * store.c - the rendezvous store: a key/value board that ranks use to find
 * each other (libfabric addresses, later handshake material).
 *
 * The file store keeps one file per key in a folder every rank can reach
 * (a tmpfs, a shared file system). Invariants:
 *  - a value appears atomically: set() writes "<dir>/.tmp.<pid>.<n>" and
 *    rename()s it over "<dir>/<key>", so get() reads the old or the new
 *    value, never a partial one;
 *  - key -> file name is injective: [A-Za-z0-9_-] stay, every other byte
 *    (the '.' included, so no name starts with ".tmp") becomes %XX;
 *  - get() never waits past its timeout: it polls with a backoff from 1 ms
 *    up to 20 ms, then returns -ETIMEDOUT.
 * The store owns its copy of the folder name; the caller owns the folder.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#define GW_TP_INTERNAL
#include "transport.h"

struct file_store {
	struct gw_store st; /* first: st.s points back here */
	char *dir;
	unsigned long tmp_seq;
};

/* "<dir>/<escaped key>" into path; -ENAMETOOLONG when it does not fit. */
static int key_path(const struct file_store *fs, const char *key, char *path, size_t cap)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n, name_start;
	int w;

	if (!key || !*key)
		return -EINVAL;
	w = snprintf(path, cap, "%s/", fs->dir);
	if (w < 0 || (size_t)w >= cap)
		return -ENAMETOOLONG;
	n = name_start = (size_t)w;
	for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
		if (n + 4 > cap || n - name_start + 3 > NAME_MAX)
			return -ENAMETOOLONG;
		if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		    (*k >= '0' && *k <= '9') || *k == '_' || *k == '-') {
			path[n++] = (char)*k;
		} else {
			path[n++] = '%';
			path[n++] = hex[*k >> 4];
			path[n++] = hex[*k & 15];
		}
	}
	path[n] = '\0';
	return 0;
}

static int write_all(int fd, const void *val, size_t len)
{
	const char *p = val;

	while (len) {
		ssize_t w = write(fd, p, len);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static int file_set(void *s, const char *key, const void *val, size_t len)
{
	struct file_store *fs = s;
	char path[PATH_MAX], tmp[PATH_MAX];
	int fd, ret, w;

	ret = key_path(fs, key, path, sizeof(path));
	if (ret)
		return ret;
	w = snprintf(tmp, sizeof(tmp), "%s/.tmp.%ld.%lu", fs->dir, (long)getpid(), fs->tmp_seq++);
	if (w < 0 || (size_t)w >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = write_all(fd, val, len);
	if (close(fd) && !ret)
		ret = -errno;
	if (ret)
		goto err_unlink;
	if (rename(tmp, path)) {
		ret = -errno;
		goto err_unlink;
	}
	return 0;

err_unlink:
	unlink(tmp);
	return ret;
}

/* One attempt: the value's length, -ENOENT when absent, -ENOSPC, -errno. */
static ssize_t read_once(const char *path, void *buf, size_t cap)
{
	struct stat sb;
	size_t got = 0;
	ssize_t ret;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb)) {
		ret = -errno;
		goto out_close;
	}
	if ((uint64_t)sb.st_size > cap) {
		ret = -ENOSPC;
		goto out_close;
	}
	while (got < (size_t)sb.st_size) {
		ssize_t r = read(fd, (char *)buf + got, (size_t)sb.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			ret = -errno;
			goto out_close;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	ret = (ssize_t)got;
out_close:
	close(fd);
	return ret;
}

static ssize_t file_get(void *s, const char *key, void *buf, size_t cap, int timeout_ms)
{
	struct file_store *fs = s;
	char path[PATH_MAX];
	int64_t deadline = gw_now_ms() + (timeout_ms > 0 ? timeout_ms : 0);
	long sleep_us = 1000;
	ssize_t ret;
	int r;

	r = key_path(fs, key, path, sizeof(path));
	if (r)
		return r;
	for (;;) {
		struct timespec ts;
		int64_t left;

		ret = read_once(path, buf, cap);
		if (ret != -ENOENT)
			return ret;
		left = deadline - gw_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		if (sleep_us / 1000 > left)
			sleep_us = (long)left * 1000;
		ts.tv_sec = sleep_us / 1000000;
		ts.tv_nsec = (sleep_us % 1000000) * 1000;
		nanosleep(&ts, NULL);
		if (sleep_us < 20000)
			sleep_us *= 2;
	}
}

static void file_destroy(void *s)
{
	struct file_store *fs = s;

	free(fs->dir);
	free(fs);
}

static const struct gw_store_ops file_ops = {
	.set = file_set,
	.get = file_get,
	.destroy = file_destroy,
};

int gw_store_file_create(const char *dir, struct gw_store **out)
{
	struct file_store *fs;
	struct stat sb;

	if (!dir || !*dir || !out)
		return -EINVAL;
	if (stat(dir, &sb))
		return -errno;
	if (!S_ISDIR(sb.st_mode))
		return -ENOTDIR;
	fs = calloc(1, sizeof(*fs));
	if (!fs)
		return -ENOMEM;
	fs->dir = strdup(dir);
	if (!fs->dir) {
		free(fs);
		return -ENOMEM;
	}
	fs->st.ops = &file_ops;
	fs->st.s = fs;
	*out = &fs->st;
	return 0;
}

int gw_store_set(struct gw_store *st, const char *key, const void *val, size_t len)
{
	if (!st || !st->ops || !key || (!val && len))
		return -EINVAL;
	return st->ops->set(st->s, key, val, len);
}

ssize_t gw_store_get(struct gw_store *st, const char *key, void *buf, size_t cap, int timeout_ms)
{
	if (!st || !st->ops || !key || (!buf && cap))
		return -EINVAL;
	return st->ops->get(st->s, key, buf, cap, timeout_ms);
}

void gw_store_destroy(struct gw_store *st)
{
	if (st && st->ops && st->ops->destroy)
		st->ops->destroy(st->s);
}
