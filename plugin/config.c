/* SPDX-License-Identifier: MIT */
/*
 * config.c - the GRADWIRE_* parameter table and its strict parser.
 *
 * Each row names a variable, its type, default, allowed values and help
 * text, and where its value lands in struct gw_config. docs/configuration.md
 * lists the same rows; tests/test_config.c fails when the two drift.
 * Unknown GRADWIRE_* names are errors too (a typo must not be ignored).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"

extern char **environ;

enum type { T_STR, T_INT, T_BOOL, T_SIZE, T_ENUM, T_CODECS, T_ALGS };

struct param {
	struct gw_param_info info;
	enum type type;
	size_t off;
	long min, max;
	const char *const *names; /* T_ENUM */
};

#define OFF(f) offsetof(struct gw_config, f)

static const char *const mac_modes[] = { "off", "optional", "required", NULL };
static const char *const log_levels[] = { "error", "warn", "info", "debug", NULL };
static const char *const algos[] = { "auto", "ring", "hier", "direct",
				     NULL }; /* enum gw_coll_algo */

static const struct param table[] = {
	{ .info = { "GRADWIRE_PROVIDER", "string", NULL,
		    "libfabric provider for peers on other hosts: verbs;ofi_rxm, the native "
		    "TCP provider (net on libfabric 1.17, tcp from 1.18 on), tcp;ofi_rxm or "
		    "shm. Unset: verbs;ofi_rxm, then the native TCP provider of the loaded "
		    "libfabric, then tcp;ofi_rxm" },
	  .type = T_STR,
	  .off = OFF(provider) },
	{ .info = { "GRADWIRE_PROVIDER_LOCAL", "string", NULL,
		    "libfabric provider for peers on this host (the same host id), e.g. shm. "
		    "Unset: shm where libfabric offers it, else GRADWIRE_PROVIDER. Set to the "
		    "same as GRADWIRE_PROVIDER, or to main, for one endpoint for every peer "
		    "(main: whatever GRADWIRE_PROVIDER resolves to; no shm). A named "
		    "provider that is not available is an error, never a fall-back" },
	  .type = T_STR,
	  .off = OFF(provider_local) },
	{ .info = { "GRADWIRE_IFACE", "string", NULL,
		    "libfabric domain (interface) to use, e.g. lo, eth0, mlx5_0. Unset: "
		    "with peers on other hosts, the provider's first that is neither "
		    "loopback nor a bridge (docker*, br-*, virbr*, veth*, cni*, "
		    "flannel*, ...), those only when nothing else is offered; with every "
		    "peer on this host, the provider's first. A named interface that does "
		    "not exist is an error, never a fall-back" },
	  .type = T_STR,
	  .off = OFF(iface) },
	{ .info = { "GRADWIRE_JOB", "string", "gw",
		    "prefix of this job's keys in the rendezvous store" },
	  .type = T_STR,
	  .off = OFF(job) },
	{ .info = { "GRADWIRE_TIMEOUT_MS", "integer", "30000",
		    "deadline of every wait (connect, handshake, send, receive), in "
		    "milliseconds; a dead peer becomes an error after it" },
	  .type = T_INT,
	  .off = OFF(timeout_ms),
	  .min = 1,
	  .max = 86400000 },
	{ .info = { "GRADWIRE_HOST_ID", "string", NULL,
		    "the name of this rank's host: ranks with the same name share a host "
		    "(GRADWIRE_PROVIDER_LOCAL, GRADWIRE_CODEC_LOCAL, the hierarchical "
		    "allreduce). Unset: the host name (gethostname()) with the kernel's boot "
		    "id. For containers or network namespaces that share a host name but not "
		    "a host, or hosts that emulate several" },
	  .type = T_STR,
	  .off = OFF(host_id) },
	{ .info = { "GRADWIRE_ALGO", "one of: auto, ring, hier, direct", "auto",
		    "allreduce algorithm: ring (flat; a lossy call re-encodes the partial "
		    "sum at every hop); direct (flat; a lossy call sends each rank's part "
		    "of a chunk, encoded once, to its owner, which sums exactly and "
		    "encodes the sum once: two compressions per value whatever the ranks; "
		    "exact calls take the ring); hier (exact reduce-scatter inside each "
		    "host, across hosts the ring, direct for lossy calls, exact allgather "
		    "inside); auto: hier on 2 "
		    "or more hosts with equal numbers of ranks, more than one each, else "
		    "direct (over shm too, one peer at a time). hier on another layout "
		    "runs flat and says why. Every rank "
		    "must use the same value" },
	  .type = T_ENUM,
	  .off = OFF(algo),
	  .names = algos },
	{ .info = { "GRADWIRE_CODEC", "codec list", "none",
		    "codec preference list for peers on other hosts, e.g. "
		    "topk:ratio=0.01,int8,none (docs/codecs.md); or auto (each link "
		    "chooses among " GW_CODEC_AUTO_DEFAULT " from its measured rate, "
		    "and again when it changes) or auto:<list> (among that list)" },
	  .type = T_CODECS,
	  .off = OFF(codec) },
	{ .info = { "GRADWIRE_CODEC_LOCAL", "codec list", NULL,
		    "preference list for peers on this host, or auto[:<list>]. Unset: "
		    "GRADWIRE_CODEC" },
	  .type = T_CODECS,
	  .off = OFF(codec_local) },
	{ .info = { "GRADWIRE_CODEC_FALLBACK", "boolean", "1",
		    "when two peers share no codec: 1 sends uncompressed (none), 0 fails "
		    "the connection" },
	  .type = T_BOOL,
	  .off = OFF(codec_fallback) },
	{ .info = { "GRADWIRE_MIN_COMPRESS_BYTES", "size", "65536",
		    "tensors smaller than this always travel exactly" },
	  .type = T_SIZE,
	  .off = OFF(min_compress_bytes) },
	{ .info = { "GRADWIRE_SEGMENT_BYTES", "size", "1M",
		    "allreduce pipelines each ring chunk in segments of about this many "
		    "bytes on the wire (a compressed segment holds more values), so "
		    "encoding, the wire and decoding overlap; 0 sends whole chunks. "
		    "Every rank must use the same value" },
	  .type = T_SIZE,
	  .off = OFF(segment_bytes) },
	{ .info = { "GRADWIRE_MAC", "one of: off, optional, required", "off",
		    "frame authentication: off; optional (on when both peers have a "
		    "key); required (a peer without one fails the connection)" },
	  .type = T_ENUM,
	  .off = OFF(mac),
	  .names = mac_modes },
	{ .info = { "GRADWIRE_MAC_KEY_FILE", "string", NULL,
		    "file holding the pre-shared key (16 to 4096 bytes); it must be a "
		    "regular file that neither group nor others can read" },
	  .type = T_STR,
	  .off = OFF(mac_key_file) },
	{ .info = { "GRADWIRE_MAC_ALGS", "MAC list", "gmac-aes256,hmac-sha256",
		    "MAC algorithms in order of preference" },
	  .type = T_ALGS,
	  .off = OFF(mac_algs) },
	{ .info = { "GRADWIRE_ONE_CONNECTION", "boolean", "0",
		    "0: with a provider over kernel TCP sockets (net, tcp;ofi_rxm), two "
		    "ranks of one IP address (one host) have a connection per direction, "
		    "as both ways on one socket wait on each other in the kernel; ranks of "
		    "other addresses keep one connection. 1: one connection per pair "
		    "everywhere. Every rank must use the same value" },
	  .type = T_BOOL,
	  .off = OFF(one_conn) },
	{ .info = { "GRADWIRE_FORCE_MR", "boolean", "0",
		    "register every buffer with libfabric even when the provider does "
		    "not ask for it (tests the path verbs needs)" },
	  .type = T_BOOL,
	  .off = OFF(force_mr) },
	{ .info = { "GRADWIRE_STATS", "boolean", "0",
		    "print per-connection statistics at finalize" },
	  .type = T_BOOL,
	  .off = OFF(stats) },
	{ .info = { "GRADWIRE_LOG", "one of: error, warn, info, debug", "warn",
		    "log level; info also logs this configuration with each value's source" },
	  .type = T_ENUM,
	  .off = OFF(log),
	  .names = log_levels },
	{ .info = { "GRADWIRE_GLOO_COMPRESS", "boolean", "0",
		    "Gloo device (libgradwire_gloo.so): lossy compression of allreduce "
		    "traffic. Only 0 is accepted: Gloo's algorithms cannot keep replicas "
		    "identical with it (docs/integration.md)" },
	  .type = T_BOOL,
	  .off = OFF(gloo_compress) },
};
#define NPARAM (sizeof(table) / sizeof(table[0]))

_Static_assert(NPARAM <= sizeof(((struct gw_config *)0)->src) /
				 sizeof(((struct gw_config *)0)->src[0]),
	       "struct gw_config.src is too small");

size_t gw_config_count(void)
{
	return NPARAM;
}

const struct gw_param_info *gw_config_param(size_t i)
{
	return i < NPARAM ? &table[i].info : NULL;
}

static int parse_bool(const char *v, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (!strcmp(v, yes[i]))
			return *out = true, 0;
		if (!strcmp(v, no[i]))
			return *out = false, 0;
	}
	return -EINVAL;
}

static int parse_size(const char *v, uint64_t *out)
{
	unsigned long long n;
	char *end;
	int shift = 0;

	if (*v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end && !end[1]) {
		const char *u = strchr("KMG", *end);

		if (!u)
			return -EINVAL;
		shift = 10 * (int)(u - "KMG" + 1);
		end++;
	}
	if (*end || n > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)n << shift;
	return 0;
}

/* Parse v for p into cfg; on error a message naming the variable. */
static int parse(const struct param *p, const char *v, struct gw_config *cfg, char *err,
		 size_t errlen)
{
	char *f = (char *)cfg + p->off, e[256] = "";
	struct gw_codec codecs[8];

	switch (p->type) {
	case T_STR:
		if (!*v)
			goto bad;
		*(const char **)(void *)f = v;
		return 0;
	case T_CODECS:
		if (gw_codec_list_parse(gw_codec_auto_list(v) ? gw_codec_auto_list(v) : v, codecs,
					8, e, sizeof(e)) < 0)
			goto bad;
		*(const char **)(void *)f = v;
		return 0;
	case T_ALGS:
		if (gw_ctx_mac_algs_check(v))
			goto bad;
		*(const char **)(void *)f = v;
		return 0;
	case T_INT: {
		char *end;
		long n;

		errno = 0;
		n = strtol(v, &end, 10);
		if (errno || end == v || *end || n < p->min || n > p->max)
			goto bad;
		*(long *)(void *)f = n;
		return 0;
	}
	case T_BOOL:
		if (parse_bool(v, (bool *)(void *)f))
			goto bad;
		return 0;
	case T_SIZE:
		if (parse_size(v, (uint64_t *)(void *)f))
			goto bad;
		return 0;
	case T_ENUM:
		for (int i = 0; p->names[i]; i++) {
			if (!strcmp(p->names[i], v)) {
				*(int *)(void *)f = i;
				return 0;
			}
		}
		goto bad;
	}
bad:
	snprintf(err, errlen, "%s='%s': expected %s%s%s", p->info.name, v, p->info.type,
		 e[0] ? ": " : "", e);
	if (p->type == T_INT)
		snprintf(err + strlen(err), errlen - strlen(err), " in [%ld, %ld]", p->min, p->max);
	if (p->type == T_SIZE)
		snprintf(err + strlen(err), errlen - strlen(err),
			 " (bytes, or with a K, M or G suffix)");
	return -EINVAL;
}

/* The closest known name, for "did you mean". */
static const char *closest(const char *name, size_t len)
{
	const char *best = NULL;
	size_t best_d = 4;

	for (size_t i = 0; i < NPARAM; i++) {
		const char *k = table[i].info.name;
		size_t kl = strlen(k), d = 0, n = kl < len ? kl : len;

		for (size_t j = 0; j < n; j++)
			d += k[j] != name[j];
		d += kl > len ? kl - len : len - kl;
		if (d < best_d) {
			best_d = d;
			best = k;
		}
	}
	return best;
}

int gw_config_load(struct gw_config *cfg, char *const *envp, char *err, size_t errlen)
{
	int rc;

	if (!envp)
		envp = environ;
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NPARAM; i++) {
		cfg->src[i] = "default";
		if (table[i].info.def) {
			rc = parse(&table[i], table[i].info.def, cfg, err, errlen);
			if (rc)
				return rc; /* a bad default is a bug */
		}
	}
	for (char *const *e = envp; *e; e++) {
		const char *eq = strchr(*e, '=');
		size_t i, len;

		if (strncmp(*e, "GRADWIRE_", 9) || !eq)
			continue;
		len = (size_t)(eq - *e);
		for (i = 0; i < NPARAM; i++)
			if (strlen(table[i].info.name) == len &&
			    !strncmp(table[i].info.name, *e, len))
				break;
		if (i == NPARAM) {
			const char *near = closest(*e, len);

			snprintf(err, errlen,
				 "unknown variable %.*s%s%s%s (see docs/configuration.md)",
				 (int)len, *e, near ? " (did you mean " : "", near ? near : "",
				 near ? "?)" : "");
			return -EINVAL;
		}
		rc = parse(&table[i], eq + 1, cfg, err, errlen);
		if (rc)
			return rc;
		cfg->src[i] = "environment";
	}
	return 0;
}

void gw_config_log(const struct gw_config *cfg, int rank)
{
	for (size_t i = 0; i < NPARAM; i++) {
		const struct param *p = &table[i];
		const char *f = (const char *)cfg + p->off;
		char v[160];

		switch (p->type) {
		case T_INT:
			snprintf(v, sizeof(v), "%ld", *(const long *)(const void *)f);
			break;
		case T_BOOL:
			snprintf(v, sizeof(v), "%d", *(const bool *)(const void *)f);
			break;
		case T_SIZE:
			snprintf(v, sizeof(v), "%llu",
				 (unsigned long long)*(const uint64_t *)(const void *)f);
			break;
		case T_ENUM:
			snprintf(v, sizeof(v), "%s", p->names[*(const int *)(const void *)f]);
			break;
		default: {
			const char *s = *(const char *const *)(const void *)f;

			snprintf(v, sizeof(v), "%s", s ? s : "(unset)");
			break;
		}
		}
		gw_log(cfg->log, GW_LOG_INFO, rank, "%s=%s (%s)", p->info.name, v, cfg->src[i]);
	}
}

uint64_t gw_config_host_id(const struct gw_config *cfg)
{
	return cfg->host_id ? gw_ctx_host_id_of(cfg->host_id) : gw_ctx_host_id_default();
}

void gw_config_ctx(const struct gw_config *cfg, struct gw_ctx_cfg *out)
{
	memset(out, 0, sizeof(*out));
	out->tp.provider = cfg->provider;
	/* "main": the main provider for every peer (one endpoint, no shm). */
	if (cfg->provider_local && strcmp(cfg->provider_local, "main"))
		out->tp.provider_local = cfg->provider_local;
	out->tp.local_auto = !cfg->provider_local; /* shm where offered */
	out->tp.iface = cfg->iface;
	out->tp.job = cfg->job;
	out->tp.timeout_ms = (int)cfg->timeout_ms;
	out->tp.force_mr = cfg->force_mr;
	out->tp.one_conn = cfg->one_conn;
	out->tp.log_level = cfg->log;
	out->codec = cfg->codec;
	out->codec_local = cfg->codec_local;
	out->fallback = cfg->codec_fallback;
	out->min_compress_bytes = cfg->min_compress_bytes;
	out->mac_mode = cfg->mac;
	out->mac_key_file = cfg->mac_key_file;
	out->mac_algs = cfg->mac_algs;
	out->host_id = gw_config_host_id(cfg);
	/* What the collectives (coll.c) assume equal on every rank. */
	gw_ctx_cfg_agree(out, "GRADWIRE_MIN_COMPRESS_BYTES", cfg->min_compress_bytes);
	gw_ctx_cfg_agree(out, "GRADWIRE_SEGMENT_BYTES", cfg->segment_bytes);
	gw_ctx_cfg_agree(out, "GRADWIRE_ALGO", (uint64_t)cfg->algo);
}
