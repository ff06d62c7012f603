/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the table of codec implementations and the spec parser.
 *
 * The table below is the only list of codecs in gradwire. Several entries may
 * share a name and wire id (generic C and SIMD variants); gw_codec_find()
 * returns the usable one with the highest priority, and the generic one (the
 * lowest priority) is the reference every variant must match byte for byte.
 * The table is validated once, on first use; an invalid table is a build
 * error in spirit, so it aborts rather than running with a broken registry.
 *
 * Spec strings: NAME[:KEY=VALUE[,KEY=VALUE...]]. Every value is parsed
 * strictly against the codec's gw_param_desc list.
 */
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "codec_impl.h"

static const struct gw_codec_ops *const table[] = {
	&gw_none_generic,     &gw_topk_generic,	 &gw_topk_avx2,	     &gw_topk_avx512,
	&gw_randomk_generic,  &gw_fp16_generic,	 &gw_fp16_avx2,	     &gw_fp16_avx512,
	&gw_bf16_generic,     &gw_bf16_avx2,	 &gw_bf16_avx512,    &gw_int8_generic,
	&gw_int8_avx2,	      &gw_int8_avx512,	 &gw_onebit_generic, &gw_onebit_avx2,
	&gw_powersgd_generic, &gw_powersgd_avx2,
};
#define TABLE_LEN (sizeof(table) / sizeof(table[0]))

static pthread_once_t table_once = PTHREAD_ONCE_INIT;
/* table[i] can run on this CPU: probed once, as CPUID is slow (a VM exit
 * under a hypervisor) and a lookup by id runs for every received payload. */
static bool table_usable[TABLE_LEN];

static int usable(const struct gw_codec_ops *o)
{
	return !o->cpu_ok || o->cpu_ok();
}

static void table_validate(void)
{
	char err[256];

	if (gw_codec_table_check(table, TABLE_LEN, err, sizeof(err))) {
		fprintf(stderr, "gradwire: codec table invalid: %s\n", err);
		abort();
	}
	for (size_t i = 0; i < TABLE_LEN; i++)
		table_usable[i] = usable(table[i]);
}

static void table_ready(void)
{
	pthread_once(&table_once, table_validate);
}

int gw_codec_table_check(const struct gw_codec_ops *const *tab, size_t n, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		const struct gw_codec_ops *o = tab[i];

		if (!o || o->size != sizeof(*o) || !o->name || !o->impl || !o->bound ||
		    !o->encode || !o->decode || !o->decode_add) {
			snprintf(err, errlen, "entry %zu (%s) is incomplete", i,
				 o && o->impl ? o->impl : "?");
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			const struct gw_codec_ops *p = tab[j];

			if (!strcmp(p->impl, o->impl)) {
				snprintf(err, errlen, "duplicate implementation %s", o->impl);
				return -EEXIST;
			}
			if ((p->id == o->id) != !strcmp(p->name, o->name)) {
				snprintf(err, errlen, "%s (id %u) and %s (id %u) conflict", o->name,
					 o->id, p->name, p->id);
				return -EEXIST;
			}
		}
	}
	return 0;
}

size_t gw_codec_count(void)
{
	table_ready();
	return TABLE_LEN;
}

const struct gw_codec_ops *gw_codec_at(size_t i)
{
	table_ready();
	return i < TABLE_LEN ? table[i] : NULL;
}

/* The usable entry matching (name or id) with the highest (or lowest) priority. */
static const struct gw_codec_ops *pick(const char *name, int id, int best)
{
	const struct gw_codec_ops *r = NULL;

	table_ready();
	for (size_t i = 0; i < TABLE_LEN; i++) {
		const struct gw_codec_ops *o = table[i];

		if ((name && strcmp(o->name, name)) || (id >= 0 && o->id != id))
			continue;
		if (!table_usable[i])
			continue;
		if (!r || (best ? o->priority > r->priority : o->priority < r->priority))
			r = o;
	}
	return r;
}

const struct gw_codec_ops *gw_codec_find(const char *name)
{
	return name ? pick(name, -1, 1) : NULL;
}

const struct gw_codec_ops *gw_codec_find_id(unsigned id)
{
	return id <= GW_CODEC_ID_MAX ? pick(NULL, (int)id, 1) : NULL;
}

const struct gw_codec_ops *gw_codec_generic(const struct gw_codec_ops *ops)
{
	return pick(NULL, ops->id, 0);
}

const struct gw_codec_ops *gw_codec_find_impl(const char *impl)
{
	table_ready();
	for (size_t i = 0; impl && i < TABLE_LEN; i++)
		if (!strcmp(table[i]->impl, impl))
			return table[i];
	return NULL;
}

size_t gw_codec_state_size(const struct gw_codec *c, uint64_t n)
{
	return c->ops->state_size ? c->ops->state_size(c, n) : 0;
}

size_t gw_codec_scratch_size(const struct gw_codec *c, uint64_t n)
{
	return c->ops->scratch_size ? c->ops->scratch_size(c, n) : 0;
}

/* ---- parameters ---------------------------------------------------------- */

static void param_store(struct gw_codec_params *p, const struct gw_param_desc *d, double v)
{
	char *f = (char *)p + d->offset;

	switch (d->type) {
	case GW_PARAM_F64:
		*(double *)(void *)f = v;
		break;
	case GW_PARAM_U64:
		*(uint64_t *)(void *)f = (uint64_t)v;
		break;
	default:
		*(uint32_t *)(void *)f = (uint32_t)v;
		break;
	}
}

void gw_codec_init(struct gw_codec *c, const struct gw_codec_ops *ops)
{
	memset(c, 0, sizeof(*c));
	c->ops = ops;
	for (const struct gw_param_desc *d = ops->params; d && d->key; d++)
		param_store(&c->p, d, d->def);
}

/* Parse one value [s, e) for d; 0 or -EINVAL with a message. */
static int param_parse(struct gw_codec *c, const struct gw_param_desc *d, const char *s, size_t len,
		       char *err, size_t errlen)
{
	char buf[64], *end;
	double v;

	if (len == 0 || len >= sizeof(buf))
		goto bad;
	memcpy(buf, s, len);
	buf[len] = '\0';

	if (d->type == GW_PARAM_ENUM) {
		for (size_t i = 0; d->names[i]; i++) {
			if (!strcmp(d->names[i], buf)) {
				param_store(&c->p, d, (double)i);
				return 0;
			}
		}
		goto bad;
	}
	if (d->type == GW_PARAM_F64) {
		errno = 0;
		v = strtod(buf, &end);
		if (errno || *end || !isfinite(v))
			goto bad;
	} else {
		unsigned long long u;

		if (buf[0] < '0' || buf[0] > '9')
			goto bad;
		errno = 0;
		u = strtoull(buf, &end, 0);
		if (errno || *end || (double)u > d->max)
			goto bad;
		if (d->type == GW_PARAM_U64) {
			if ((double)u < d->min)
				goto bad;
			*(uint64_t *)(void *)((char *)&c->p + d->offset) = u;
			return 0;
		}
		v = (double)u;
	}
	if (v > d->max || v < d->min || (d->min_open && v == d->min))
		goto bad;
	param_store(&c->p, d, v);
	return 0;
bad:
	if (d->type == GW_PARAM_ENUM) {
		int o = snprintf(err, errlen, "%s: %s=%.*s: expected one of", c->ops->name, d->key,
				 (int)len, s);

		for (size_t i = 0; d->names[i] && o >= 0 && (size_t)o < errlen; i++)
			o += snprintf(err + o, errlen - o, " %s", d->names[i]);
	} else {
		snprintf(err, errlen, "%s: %s=%.*s: expected a %s in %s%g, %g]", c->ops->name,
			 d->key, (int)len, s, d->type == GW_PARAM_F64 ? "number" : "whole number",
			 d->min_open ? "(" : "[", d->min, d->max);
	}
	return -EINVAL;
}

int gw_codec_parse(const char *spec, struct gw_codec *c, char *err, size_t errlen)
{
	const struct gw_codec_ops *ops;
	const char *colon, *s;
	char name[32];
	size_t nlen;
	unsigned seen = 0;

	if (!spec || !c)
		return -EINVAL;
	colon = strchr(spec, ':');
	nlen = colon ? (size_t)(colon - spec) : strlen(spec);
	if (nlen == 0 || nlen >= sizeof(name)) {
		snprintf(err, errlen, "codec spec '%s': no codec name", spec);
		return -EINVAL;
	}
	memcpy(name, spec, nlen);
	name[nlen] = '\0';
	ops = gw_codec_find(name);
	if (!ops) {
		int o = snprintf(err, errlen, "unknown codec '%s' (known:", name);

		for (size_t i = 0; i < TABLE_LEN && o >= 0 && (size_t)o < errlen; i++)
			if (!i || strcmp(table[i]->name, table[i - 1]->name))
				o += snprintf(err + o, errlen - o, " %s", table[i]->name);
		if (o >= 0 && (size_t)o < errlen)
			snprintf(err + o, errlen - o, ")");
		return -EINVAL;
	}
	gw_codec_init(c, ops);
	if (!colon)
		return 0;

	for (s = colon + 1;;) {
		const char *comma = strchr(s, ','), *eq;
		const char *e = comma ? comma : s + strlen(s);
		const struct gw_param_desc *d;
		unsigned idx = 0;
		int rc;

		eq = memchr(s, '=', (size_t)(e - s));
		if (!eq || eq == s) {
			snprintf(err, errlen, "%s: '%.*s' is not KEY=VALUE", ops->name,
				 (int)(e - s), s);
			return -EINVAL;
		}
		for (d = ops->params; d && d->key; d++, idx++)
			if (strlen(d->key) == (size_t)(eq - s) &&
			    !memcmp(d->key, s, (size_t)(eq - s)))
				break;
		if (!d || !d->key) {
			int o = snprintf(err, errlen, "%s: unknown key '%.*s'", ops->name,
					 (int)(eq - s), s);

			for (d = ops->params; d && d->key && o >= 0 && (size_t)o < errlen; d++)
				o += snprintf(err + o, errlen - o, "%s%s",
					      d == ops->params ? " (keys:" : "", d->key);
			if (ops->params && ops->params->key && o >= 0 && (size_t)o < errlen)
				snprintf(err + o, errlen - o, ")");
			else if (o >= 0 && (size_t)o < errlen)
				snprintf(err + o, errlen - o, " (it takes none)");
			return -EINVAL;
		}
		if (seen & (1u << idx)) {
			snprintf(err, errlen, "%s: key '%s' given twice", ops->name, d->key);
			return -EINVAL;
		}
		seen |= 1u << idx;
		rc = param_parse(c, d, eq + 1, (size_t)(e - eq - 1), err, errlen);
		if (rc)
			return rc;
		if (!comma)
			return 0;
		s = comma + 1;
	}
}

const char *gw_codec_auto_list(const char *spec)
{
	if (!spec || strncmp(spec, "auto", 4))
		return NULL;
	if (!spec[4])
		return GW_CODEC_AUTO_DEFAULT;
	return spec[4] == ':' ? spec + 5 : NULL;
}

int gw_codec_list_parse(const char *list, struct gw_codec *out, int max, char *err, size_t errlen)
{
	char spec[256];
	const char *s = list;
	int n = 0;

	if (!list || !*list) {
		snprintf(err, errlen, "empty codec list");
		return -EINVAL;
	}
	while (*s) {
		const char *e = s;
		size_t len;
		int rc;

		/* Extend over ",key=value" tokens that belong to this codec. */
		for (;;) {
			const char *c = strchr(e, ',');
			const char *next = c ? c + 1 : NULL;
			size_t tl;

			if (!c) {
				e += strlen(e);
				break;
			}
			tl = strcspn(next, ",");
			if (memchr(next, '=', tl) && !memchr(next, ':', tl)) {
				e = next;
				continue;
			}
			e = c;
			break;
		}
		len = (size_t)(e - s);
		if (len >= sizeof(spec)) {
			snprintf(err, errlen, "codec spec too long: '%.40s...'", s);
			return -EINVAL;
		}
		if (n == max) {
			snprintf(err, errlen, "more than %d codecs in '%s'", max, list);
			return -EINVAL;
		}
		memcpy(spec, s, len);
		spec[len] = '\0';
		rc = gw_codec_parse(spec, &out[n], err, errlen);
		if (rc)
			return rc;
		for (int i = 0; i < n; i++) {
			if (out[i].ops->id == out[n].ops->id) {
				snprintf(err, errlen, "codec '%s' listed twice in '%s'",
					 out[n].ops->name, list);
				return -EINVAL;
			}
		}
		n++;
		if (!*e)
			break;
		s = e + 1;
		if (!*s) {
			snprintf(err, errlen, "codec list '%s' ends with a comma", list);
			return -EINVAL;
		}
	}
	return n;
}

ssize_t gw_codec_format(const struct gw_codec *c, char *buf, size_t len)
{
	size_t o;
	int w = snprintf(buf, len, "%s", c->ops->name);

	for (const struct gw_param_desc *d = c->ops->params; d && d->key; d++) {
		const char *f = (const char *)&c->p + d->offset;
		char sep = d == c->ops->params ? ':' : ',';

		if (w < 0 || (size_t)w >= len)
			return -ENOSPC;
		o = (size_t)w;
		switch (d->type) {
		case GW_PARAM_F64:
			w = snprintf(buf + o, len - o, "%c%s=%.15g", sep, d->key,
				     *(const double *)(const void *)f);
			break;
		case GW_PARAM_U64:
			w = snprintf(buf + o, len - o, "%c%s=%llu", sep, d->key,
				     (unsigned long long)*(const uint64_t *)(const void *)f);
			break;
		case GW_PARAM_U32:
			w = snprintf(buf + o, len - o, "%c%s=%u", sep, d->key,
				     *(const uint32_t *)(const void *)f);
			break;
		case GW_PARAM_ENUM:
			w = snprintf(buf + o, len - o, "%c%s=%s", sep, d->key,
				     d->names[*(const uint32_t *)(const void *)f]);
			break;
		}
		if (w >= 0)
			w += (int)o;
	}
	if (w < 0 || (size_t)w >= len)
		return -ENOSPC;
	return w;
}
