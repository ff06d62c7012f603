/* SPDX-License-Identifier: MIT */
/*
 * mpi-allreduce-bench.c - the baseline scripts/bench-mpi measures gradwire
 * against: MPI_Allreduce (sum, float32) of the same sizes, timed like
 * gradwire-perf (warm-up, then the median over iterations of the slowest
 * rank's time), busbw = 2 (n - 1) / n x bytes / time. Built by the script
 * with mpicc; not part of the meson build (Open MPI is optional).
 *
 * usage: mpi-allreduce-bench MINBYTES MAXBYTES FACTOR ITERS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	long lo, hi, f, iters;
	int rank, size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 5 || (lo = atol(argv[1])) < 4 || (hi = atol(argv[2])) < lo ||
	    (f = atol(argv[3])) < 2 || (iters = atol(argv[4])) < 1 || iters > 1000) {
		if (!rank)
			fprintf(stderr, "usage: %s MINBYTES MAXBYTES FACTOR ITERS\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	for (long bytes = lo; bytes <= hi; bytes *= f) {
		long n = bytes / 4;
		float *x = malloc((size_t)n * 4);
		double *t = malloc((size_t)iters * sizeof(double));

		for (long i = 0; i < n; i++)
			x[i] = (float)((i * 7 + rank) % 97) * 0.01f;
		MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		for (long k = 0; k < iters; k++) {
			double t0, dt;

			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
			MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			dt = MPI_Wtime() - t0;
			MPI_Allreduce(&dt, &t[k], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
		}
		qsort(t, (size_t)iters, sizeof(double), cmp);
		if (!rank)
			printf("{\"bytes\": %ld, \"time_us\": %.1f, \"busbw_gbps\": %.4f, "
			       "\"impl\": \"MPI_Allreduce\", \"ranks\": %d}\n",
			       bytes, t[iters / 2] * 1e6,
			       2.0 * (size - 1) / size * (double)bytes / t[iters / 2] / 1e9, size);
		free(x);
		free(t);
	}
	MPI_Finalize();
	return 0;
}
