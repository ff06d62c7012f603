/* SPDX-License-Identifier: MIT */
/*
 * allreduce.c - the C API in brief: each rank adds its vector to the
 * others' through the plugin table, gradwire_plugin_v1 (gradwire/plugin.h).
 *
 *   cc allreduce.c $(pkg-config --cflags --libs gradwire) -o allreduce
 *   mkdir /tmp/gw && ./allreduce 0 2 /tmp/gw & ./allreduce 1 2 /tmp/gw
 *
 * The ranks meet through files in a folder they all reach (on a shared
 * filesystem across hosts). GRADWIRE_* variables configure the rest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <gradwire/plugin.h>

#define N (1 << 20)

int main(int argc, char **argv)
{
	const struct gradwire_plugin_v1 *gw = &gradwire_plugin_v1;
	struct gradwire_context *ctx = NULL;
	static float x[N];
	char err[256] = "";
	int rank, size, want, rc;

	if (argc != 4) {
		fprintf(stderr, "usage: %s RANK SIZE FOLDER\n", argv[0]);
		return 2;
	}
	rank = atoi(argv[1]);
	size = atoi(argv[2]);
	for (int i = 0; i < N; i++)
		x[i] = (float)(rank + 1);

	rc = gw->init(err, sizeof(err));
	if (rc < 0)
		goto err_print;
	rc = gw->context_create_file(rank, size, argv[3], &ctx, err, sizeof(err));
	if (rc < 0)
		goto err_print;
	/* Flags 0: exact. GRADWIRE_LOSSY would let the negotiated codec carry it. */
	rc = gw->allreduce(ctx, x, N, GRADWIRE_SUM, 0);
	if (rc < 0) {
		snprintf(err, sizeof(err), "%s", gw->error(ctx) ? gw->error(ctx) : "");
		goto err_destroy;
	}
	want = size * (size + 1) / 2; /* 1 + 2 + ... + size */
	printf("rank %d of %d: x[0] = %g, x[N-1] = %g, expected %d\n", rank, size, x[0], x[N - 1],
	       want);
	gw->context_destroy(ctx);
	gw->finalize();
	return x[0] == want && x[N - 1] == want ? 0 : 1;

err_destroy:
	gw->context_destroy(ctx);
err_print:
	fprintf(stderr, "rank %d: %s (%s)\n", rank, err, gw->strerror(rc));
	return 1;
}
