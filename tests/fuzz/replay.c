/* SPDX-License-Identifier: MIT */
/*
 * replay.c - corpus replay driver: runs LLVMFuzzerTestOneInput() on files.
 *
 * usage: replay_<target> PATH...   (files, or directories: their regular
 * files, sorted by name, dotfiles skipped; one level, like libFuzzer corpora)
 *
 * Built with the ordinary compiler so `meson test` checks every committed
 * corpus input without clang. Each input is copied into a buffer of exactly
 * its size, so a sanitized build sees any over-read. A missing path, an
 * unreadable file, or no input at all is a failure: an empty corpus must not
 * pass silently. A bug in a target aborts (the test fails and names the file).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf;
	long sz;

	if (!f) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fprintf(stderr, "replay: %s: cannot size it\n", path);
		fclose(f);
		return -1;
	}
	buf = malloc(sz ? (size_t)sz : 1);
	if (!buf || fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
		fprintf(stderr, "replay: %s: read failed\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	/* Name the input first: if the target aborts, the log says which. */
	fprintf(stderr, "replay: %s (%ld bytes)\n", path, sz);
	LLVMFuzzerTestOneInput(buf, (size_t)sz);
	free(buf);
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Return the number of inputs run, or -1. */
static long run_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char **names = NULL;
	size_t n = 0, cap = 0;
	long done = 0;

	if (!d) {
		fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
		return -1;
	}
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 256;
			names = realloc(names, cap * sizeof(*names));
			if (!names)
				abort();
		}
		if (!(names[n++] = strdup(e->d_name)))
			abort();
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(dir) + strlen(names[i]) + 2;
		char *path = malloc(len);
		struct stat st;

		if (!path)
			abort();
		snprintf(path, len, "%s/%s", dir, names[i]);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(path)) {
				done = -1;
				free(path);
				break;
			}
			done++;
		}
		free(path);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return done;
}

int main(int argc, char **argv)
{
	long total = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		struct stat st;
		long r;

		if (stat(argv[i], &st)) {
			fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (S_ISDIR(st.st_mode)) {
			r = run_dir(argv[i]);
			if (r == 0)
				fprintf(stderr, "replay: %s: no inputs\n", argv[i]);
		} else {
			r = run_file(argv[i]) ? -1 : 1;
		}
		if (r <= 0)
			return 1;
		total += r;
	}
	printf("replay: %ld input(s), all passed\n", total);
	return 0;
}
