/* SPDX-License-Identifier: MIT */
/*
 * perf.c - gradwire-perf: allreduce bandwidth, compression and error, in the
 * spirit of nccl-tests' all_reduce_perf.
 *
 *   gradwire-perf -n 4 -b 1M -e 64M -f 4 --codec int8 [--check] [--json]
 *
 * Local mode forks -n ranks that meet through a file store in a fresh
 * temporary folder (removed afterwards), over tcp;ofi_rxm on lo unless told
 * otherwise. Joined mode: when RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_
 * RANK/SIZE (mpirun) or SLURM_PROCID/SLURM_NTASKS (srun) are set, this
 * process is that rank of that job and meets the others either through MPI
 * (built with MPI, started by mpirun, no --store: perf_mpi.c) or through a
 * file store in --store DIR, a folder every rank reaches. There each job gets
 * a subfolder "job-<id>" (--job, else the launcher's TORCHELASTIC_RUN_ID,
 * SLURM_JOB_ID.SLURM_STEP_ID or PMIX_NAMESPACE), which rank 0 removes after
 * a final barrier; with no job id known DIR itself is the store (it must hold
 * no keys of an earlier run) and rank 0 removes this job's keys from it.
 * Only rank 0 prints progress; the others print errors only.
 *
 * Settings come from GRADWIRE_* (plugin/config.c); --provider, --iface,
 * --codec and --min-compress override them. --hosts H makes the local ranks
 * emulate H hosts (GRADWIRE_HOST_ID), so the hierarchical allreduce runs
 * (GRADWIRE_ALGO); the header line and the JSON say which algorithm ran.
 *
 * Each rank's data is deterministic (SplitMix64 of rank and size), so rank 0
 * computes the exact sum in double and reports the relative L2 error of the
 * result; every rank hashes its result and the hashes are compared (bit-
 * identical replicas). One row per size: bytes, median time over iterations
 * (each iteration's time is the slowest rank's), algbw = bytes / time,
 * busbw = 2 (n - 1) / n algbw, wire_ratio = the tensor bytes an exact ring
 * moves (2 (n - 1) x bytes per call, the connections' raw bytes for a ring
 * codec) / wire bytes sent: PowerSGD's linear form sends only its factors,
 * exactly, so its connections' own raw/wire would say ~1. The
 * error and hash come from one allreduce after the residuals were reset, so
 * error feedback from earlier calls does not blur them.
 *
 * This file is main: local mode (forked ranks over a fresh folder), a
 * launcher's rank (its store folder) or MPI's; perf.h lists the other parts.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fi_load.h"
#include "perf.h"
#ifdef GW_HAVE_MPI
#include "perf_mpi.h"
#endif

void perf_remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* Remove the files of the keys under job's prefix ("<job>/...") from a file
 * store's folder: the store escapes every byte outside [A-Za-z0-9_-] as %XX
 * (transport/store.c), so they are the names that start with the escaped
 * "<job>/". Other files are left alone. */
void perf_remove_keys(const char *dir, const char *job)
{
	static const char hex[] = "0123456789ABCDEF";
	char prefix[256], path[4096];
	size_t n = 0, pl;
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	for (const unsigned char *k = (const unsigned char *)job; *k && n + 4 < sizeof(prefix);
	     k++) {
		if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		    (*k >= '0' && *k <= '9') || *k == '_' || *k == '-') {
			prefix[n++] = (char)*k;
		} else {
			prefix[n++] = '%';
			prefix[n++] = hex[*k >> 4];
			prefix[n++] = hex[*k & 15];
		}
	}
	snprintf(prefix + n, sizeof(prefix) - n, "%%2F");
	pl = strlen(prefix);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, pl))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		unlink(path);
	}
	closedir(d);
}

/* Fork o->ranks ranks over a fresh file store; every child dies by alarm()
 * rather than hang, and the parent kills the ones left at its deadline. */
static int run_local(const struct opts *o)
{
	char dir[] = "/tmp/gradwire-perf-XXXXXX";
	pid_t pid[256];
	int code[256], left = o->ranks, worst = 0;
	double deadline = perf_now_s() + o->timeout_s + 10;

	if (!mkdtemp(dir)) {
		perror("gradwire-perf: mkdtemp");
		return 3;
	}
	fflush(NULL);
	for (int r = 0; r < o->ranks; r++) {
		pid[r] = fork();
		if (pid[r] < 0) {
			perror("gradwire-perf: fork");
			for (int k = 0; k < r; k++)
				kill(pid[k], SIGKILL);
			left = r;
			worst = 3;
			break;
		}
		if (pid[r] == 0) {
			char host[32];

			if (o->hosts) { /* rank r on host r * hosts / ranks */
				snprintf(host, sizeof(host), "gradwire-perf-%d",
					 r * o->hosts / o->ranks);
				setenv("GRADWIRE_HOST_ID", host, 1);
			}
			alarm((unsigned)o->timeout_s);
			_exit(perf_rank_main(o, r, o->ranks, dir, NULL));
		}
		code[r] = -1;
	}
	while (left > 0) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);

		if (p > 0) {
			for (int r = 0; r < o->ranks; r++)
				if (pid[r] == p)
					code[r] = WIFEXITED(st) ? WEXITSTATUS(st)
								: 128 + WTERMSIG(st);
			left--;
			continue;
		}
		if (p < 0)
			break;
		if (perf_now_s() > deadline) {
			for (int r = 0; r < o->ranks; r++)
				if (code[r] == -1)
					kill(pid[r], SIGKILL);
			deadline = perf_now_s() + 5;
		}
		usleep(10000);
	}
	for (int r = 0; r < o->ranks && !worst; r++) {
		if (code[r] != 0) {
			fprintf(stderr, "gradwire-perf: rank %d exited %d\n", r, code[r]);
			worst = code[r] == 1 ? 1 : code[r] < 0 ? 5 : code[r];
		}
	}
	perf_remove_dir(dir);
	return worst;
}

#ifdef GW_HAVE_MPI
#define MPI_BUILT 1
#define mpi_launched gw_perf_mpi_launched
#else
#define MPI_BUILT 0
#define mpi_launched() false
#endif

/* Rank and size from the launcher, if there is one. */
static bool launcher(int *rank, int *size)
{
	static const char *const vars[][2] = {
		{ "RANK", "WORLD_SIZE" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *r = getenv(vars[i][0]), *s = getenv(vars[i][1]);

		if (r && s && !perf_parse_int(s, 1, 1 << 15, size) &&
		    !perf_parse_int(r, 0, *size - 1, rank))
			return true;
	}
	return false;
}

/* The job's id: --job, else the launcher's (torchrun, Slurm, PMIx/Open MPI),
 * made a folder name ([A-Za-z0-9._-], others '_'). false: none known. */
static bool job_id(const struct opts *o, char *out, size_t len)
{
	const char *id = o->job, *step = NULL;
	size_t n = 0;

	if (!id)
		id = getenv("TORCHELASTIC_RUN_ID");
	if (!id && (id = getenv("SLURM_JOB_ID")))
		step = getenv("SLURM_STEP_ID");
	if (!id)
		id = getenv("PMIX_NAMESPACE");
	if (!id)
		id = getenv("OMPI_MCA_ess_base_jobid");
	if (!id || !*id)
		return false;
	n = (size_t)snprintf(out, len, "job-%s%s%s", id, step ? "." : "", step ? step : "");
	for (char *p = out + 4; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			*p = '_';
	return n < len;
}

/* The store folder of a launched rank: DIR/job-<id> (made here, every rank
 * alike), or DIR itself when no job id is known (rank 0 says so). Sets
 * o->clean. Return: 0 or the exit code. */
static int store_dir(struct opts *o, int rank, char *out, size_t len)
{
	char id[200];

	if (!job_id(o, id, sizeof(id))) {
		if (rank == 0)
			fprintf(stderr,
				"gradwire-perf: no job id from the launcher (TORCHELASTIC_RUN_ID, "
				"SLURM_JOB_ID, PMIX_NAMESPACE) nor --job: the store is %s itself, "
				"which must hold no keys of an earlier run; give --job ID (the "
				"same on every rank) for a subfolder of this job's own\n",
				o->store);
		snprintf(out, len, "%s", o->store);
		o->clean = CLEAN_KEYS;
		return 0;
	}
	if ((size_t)snprintf(out, len, "%s/%s", o->store, id) >= len) {
		fprintf(stderr, "gradwire-perf: --store %s: path too long\n", o->store);
		return 2;
	}
	if (mkdir(out, 0700) && errno != EEXIST) {
		fprintf(stderr, "gradwire-perf: rank %d: mkdir %s: %s\n", rank, out,
			strerror(errno));
		return 3;
	}
	o->clean = CLEAN_DIR;
	return 0;
}

int main(int argc, char **argv)
{
	const char *prov;
	struct opts o;
	int rank, size, bad;
	char dir[4096];

	bad = perf_opts_parse(argc, argv, &o);
	if (bad >= 0)
		return bad;
	if (o.hosts && (launcher(&rank, &size) || (MPI_BUILT && mpi_launched()))) {
		fprintf(stderr, "gradwire-perf: --hosts is for local mode; under a "
				"launcher set GRADWIRE_HOST_ID where needed\n");
		return 2;
	}
#ifdef GW_HAVE_MPI
	if (!o.store && gw_perf_mpi_launched()) {
		struct gw_store *st = NULL;
		int rc = gw_perf_mpi_init(&rank, &size);

		if (rc) {
			fprintf(stderr, "gradwire-perf: MPI_Init failed (--store DIR meets "
					"through a folder instead)\n");
			return 3;
		}
		rc = gw_perf_mpi_store_create(&st);
		if (rc)
			fprintf(stderr, "gradwire-perf: rank %d: the MPI store: %s\n", rank,
				gw_strerror(rc));
		else
			rc = perf_rank_main(&o, rank, size, NULL, st);
		gw_perf_mpi_finalize();
		return rc < 0 ? 3 : rc;
	}
#endif
	if (launcher(&rank, &size)) {
		if (!o.store) {
			fprintf(stderr,
				"gradwire-perf: rank %d of %d from the launcher: "
				"--store DIR (a folder all ranks reach) is required%s\n",
				rank, size,
				MPI_BUILT ? ""
					  : " (under mpirun, a gradwire-perf built with MPI "
					    "needs none: meson -Dmpi=enabled)");
			return 2;
		}
		bad = store_dir(&o, rank, dir, sizeof(dir));
		return bad ? bad : perf_rank_main(&o, rank, size, dir, NULL);
	}
	/* Local: one host, so loopback unless told otherwise. */
	if (!o.provider && !getenv("GRADWIRE_PROVIDER"))
		o.provider = gw_fi_tcp_provider(); /* "net" or "tcp": fi_load.h */
	prov = o.provider ? o.provider : getenv("GRADWIRE_PROVIDER");
	if (!o.iface && !getenv("GRADWIRE_IFACE") &&
	    (strstr(prov, "tcp") || !strcmp(prov, "net"))) {
		o.iface = "lo";
		setenv("FI_TCP_IFACE", "lo", 0);
		setenv("FI_NET_IFACE", "lo", 0);
	}
	return run_local(&o);
}
