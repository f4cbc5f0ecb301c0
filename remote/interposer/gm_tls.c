/*
 * The interposer's TLS client (gm_tls.h), on BearSSL
 * (https://bearssl.org, MIT): a small library without dynamic allocation,
 * written to run in constant time, linked statically into libcuda.so.1
 * with its symbols hidden, since the interposer runs in containers whose
 * libssl, if any, is unknown. docs/remote.md ("TLS") says why BearSSL.
 *
 * Profile: TLS 1.2 only (BearSSL has no 1.3), ECDHE key exchange and AEAD
 * suites only (AES-GCM, ChaCha20-Poly1305), the suites gpumux-remoted
 * offers. The server's chain is checked by BearSSL's X.509 "minimal"
 * engine against the CAs of GPUMUX_REMOTE_TLS_CA, and its name: a DNS name
 * by BearSSL (which also sends it as SNI), an IP address here, against the
 * certificate's iPAddress names (BearSSL checks DNS names only).
 *
 * The engine runs on the non-blocking socket with gm_wire.c's bounded
 * waits. Sending copies the caller's bytes into the engine's output record
 * (16 KiB of plaintext at most), which is sealed in place; receiving opens
 * each record in place and copies its plaintext out: one copy each way,
 * and a system call per record, for large copies as for small frames.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <bearssl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gm_internal.h"
#include "gm_tls.h"

#define GM_TLS_MAX_FILE (1u << 20) /* a larger PEM file is refused */
#define GM_TLS_MAX_EE (16u << 10)  /* the server's certificate, kept to check an IP address */
#define GM_TLS_MAX_OBJS 64         /* PEM objects in one file */

static const uint16_t gm_tls_suites[] = {
	BR_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,       BR_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	BR_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,       BR_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	BR_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, BR_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
};

/* gm_x509 is BearSSL's minimal X.509 engine, plus the check of an IP
 * address against the server certificate's iPAddress names. */
typedef struct {
	const br_x509_class *vtable; /* first: BearSSL passes &vtable */
	br_x509_minimal_context minimal;
	unsigned char ip[16];
	size_t iplen; /* 0: the server is named by DNS, checked by minimal */
	int depth;    /* of the certificate being read; 0 is the server's */
	size_t eelen;
	int ee_too_long;
	unsigned char ee[GM_TLS_MAX_EE];
} gm_x509;

/* A PEM object. */
typedef struct {
	char name[128];
	unsigned char *der;
	size_t len;
} gm_pem;

/* The session. */
static struct gm_tls {
	br_ssl_client_context cc;
	gm_x509 x509;
	unsigned char iobuf[BR_SSL_BUFSIZE_BIDI];
	br_x509_trust_anchor tas[GM_TLS_MAX_OBJS];
	size_t ntas;
	br_x509_certificate chain[GM_TLS_MAX_OBJS]; /* the client's (mutual TLS) */
	size_t nchain;
	br_skey_decoder_context key; /* holds the client's private key */
	int fd;
	int up;         /* the handshake is done */
	int client_key; /* a client certificate was configured */
	char server[256];
	const char *ca;
} *gm_t;

int gm_tls_on(void)
{
	return gm_t != NULL && gm_t->up;
}

/* ---- files ---- */

static void gm_blob_append(void *ctx, const void *data, size_t len)
{
	gm_pem *o = ctx;
	if (o->der == NULL && o->len != 0)
		return; /* out of memory before */
	unsigned char *d = realloc(o->der, o->len + len);
	if (d == NULL) {
		free(o->der);
		o->der = NULL;
		o->len = 1; /* marks the failure */
		return;
	}
	memcpy(d + o->len, data, len);
	o->der = d;
	o->len += len;
}

static void gm_pem_free(gm_pem *objs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(objs[i].der);
}

/* gm_pem_read decodes the PEM file named by env (at path) into objs. */
static int gm_pem_read(const char *env, const char *path, gm_pem *objs, size_t *nobjs, char *why, size_t wl)
{
	char eb[128];
	*nobjs = 0;
	FILE *f = fopen(path, "re");
	if (f == NULL) {
		snprintf(why, wl, "%s=%s: %s", env, path, strerror_r(errno, eb, sizeof eb));
		return -1;
	}
	struct stat st;
	if (fstat(fileno(f), &st) < 0 || st.st_size > (off_t)GM_TLS_MAX_FILE) {
		fclose(f);
		snprintf(why, wl, "%s=%s: not a PEM file of at most %u bytes", env, path, GM_TLS_MAX_FILE);
		return -1;
	}
	size_t size = (size_t)st.st_size;
	unsigned char *text = malloc(size + 1);
	int ok = text != NULL && fread(text, 1, size, f) == size;
	fclose(f);
	if (!ok) {
		free(text);
		snprintf(why, wl, "%s=%s: cannot read it", env, path);
		return -1;
	}
	text[size++] = '\n'; /* BearSSL wants a newline after the last END line */

	br_pem_decoder_context pc;
	br_pem_decoder_init(&pc);
	const unsigned char *p = text;
	size_t left = size;
	gm_pem *cur = NULL;
	int rc = 0;
	while (left > 0 && rc == 0) {
		size_t k = br_pem_decoder_push(&pc, p, left);
		p += k;
		left -= k;
		switch (br_pem_decoder_event(&pc)) {
		case BR_PEM_BEGIN_OBJ:
			if (*nobjs == GM_TLS_MAX_OBJS) {
				snprintf(why, wl, "%s=%s: more than %d PEM objects", env, path, GM_TLS_MAX_OBJS);
				rc = -1;
				break;
			}
			cur = &objs[(*nobjs)++];
			memset(cur, 0, sizeof *cur);
			snprintf(cur->name, sizeof cur->name, "%s", br_pem_decoder_name(&pc));
			br_pem_decoder_setdest(&pc, gm_blob_append, cur);
			break;
		case BR_PEM_END_OBJ:
			if (cur != NULL && cur->der == NULL) {
				snprintf(why, wl, "%s=%s: out of memory or an empty PEM object", env, path);
				rc = -1;
			}
			cur = NULL;
			break;
		case BR_PEM_ERROR:
			snprintf(why, wl, "%s=%s: not valid PEM", env, path);
			rc = -1;
			break;
		}
	}
	if (rc == 0 && cur != NULL) {
		snprintf(why, wl, "%s=%s: a PEM object without its END line", env, path);
		rc = -1;
	}
	free(text);
	if (rc < 0) {
		gm_pem_free(objs, *nobjs);
		*nobjs = 0;
	}
	return rc;
}

static void *gm_dup(const void *p, size_t n)
{
	void *d = malloc(n ? n : 1);
	if (d != NULL && n)
		memcpy(d, p, n);
	return d;
}

/* gm_load_cas makes the trust anchors of the CA file: every certificate in
 * it (a CA's, or a server's own, trusted as it is). */
static int gm_load_cas(const char *path, char *why, size_t wl)
{
	gm_pem objs[GM_TLS_MAX_OBJS];
	size_t n;
	if (gm_pem_read(GM_ENV_TLS_CA, path, objs, &n, why, wl) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (strcmp(objs[i].name, "CERTIFICATE") != 0 && strcmp(objs[i].name, "X509 CERTIFICATE") != 0)
			continue;
		gm_pem dn = {.der = NULL, .len = 0};
		br_x509_decoder_context dc;
		br_x509_decoder_init(&dc, gm_blob_append, &dn);
		br_x509_decoder_push(&dc, objs[i].der, objs[i].len);
		const br_x509_pkey *pk = br_x509_decoder_get_pkey(&dc);
		br_x509_trust_anchor *ta = &gm_t->tas[gm_t->ntas];
		memset(ta, 0, sizeof *ta);
		if (pk == NULL || dn.der == NULL) {
			snprintf(why, wl, "%s=%s: certificate %zu cannot be decoded (BearSSL error %d)", GM_ENV_TLS_CA, path,
				 i + 1, br_x509_decoder_last_error(&dc));
			free(dn.der);
			rc = -1;
			break;
		}
		ta->dn.data = dn.der;
		ta->dn.len = dn.len;
		ta->flags = br_x509_decoder_isCA(&dc) ? BR_X509_TA_CA : 0;
		ta->pkey.key_type = pk->key_type;
		int oom;
		if (pk->key_type == BR_KEYTYPE_RSA) {
			ta->pkey.key.rsa.n = gm_dup(pk->key.rsa.n, pk->key.rsa.nlen);
			ta->pkey.key.rsa.nlen = pk->key.rsa.nlen;
			ta->pkey.key.rsa.e = gm_dup(pk->key.rsa.e, pk->key.rsa.elen);
			ta->pkey.key.rsa.elen = pk->key.rsa.elen;
			oom = ta->pkey.key.rsa.n == NULL || ta->pkey.key.rsa.e == NULL;
		} else {
			ta->pkey.key.ec.curve = pk->key.ec.curve;
			ta->pkey.key.ec.q = gm_dup(pk->key.ec.q, pk->key.ec.qlen);
			ta->pkey.key.ec.qlen = pk->key.ec.qlen;
			oom = ta->pkey.key.ec.q == NULL;
		}
		gm_t->ntas++; /* freed with the session, even if incomplete */
		if (oom) {
			snprintf(why, wl, "out of memory reading %s", GM_ENV_TLS_CA);
			rc = -1;
		}
	}
	gm_pem_free(objs, n);
	if (rc == 0 && gm_t->ntas == 0) {
		snprintf(why, wl, "%s=%s: no certificate in it", GM_ENV_TLS_CA, path);
		rc = -1;
	}
	return rc;
}

/* gm_load_client sets the client certificate chain and key (mutual TLS). */
static int gm_load_client(const char *cert, const char *key, char *why, size_t wl)
{
	gm_pem objs[GM_TLS_MAX_OBJS];
	size_t n;
	if (gm_pem_read(GM_ENV_TLS_CERT, cert, objs, &n, why, wl) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(objs[i].name, "CERTIFICATE") != 0 && strcmp(objs[i].name, "X509 CERTIFICATE") != 0) {
			free(objs[i].der);
			continue;
		}
		gm_t->chain[gm_t->nchain].data = objs[i].der; /* the session owns it now */
		gm_t->chain[gm_t->nchain].data_len = objs[i].len;
		gm_t->nchain++;
	}
	if (gm_t->nchain == 0) {
		snprintf(why, wl, "%s=%s: no certificate in it", GM_ENV_TLS_CERT, cert);
		return -1;
	}

	if (gm_pem_read(GM_ENV_TLS_KEY, key, objs, &n, why, wl) < 0)
		return -1;
	int found = 0;
	br_skey_decoder_init(&gm_t->key);
	for (size_t i = 0; i < n && !found; i++) {
		if (strcmp(objs[i].name, "PRIVATE KEY") != 0 && strcmp(objs[i].name, "RSA PRIVATE KEY") != 0 &&
		    strcmp(objs[i].name, "EC PRIVATE KEY") != 0)
			continue;
		br_skey_decoder_push(&gm_t->key, objs[i].der, objs[i].len);
		found = 1;
	}
	for (size_t i = 0; i < n; i++)
		explicit_bzero(objs[i].der, objs[i].len);
	gm_pem_free(objs, n);
	int err = br_skey_decoder_last_error(&gm_t->key);
	if (!found || err != 0) {
		snprintf(why, wl, "%s=%s: no unencrypted RSA or EC private key in it%s", GM_ENV_TLS_KEY, key,
			 found ? " that BearSSL can decode" : "");
		return -1;
	}
	switch (br_skey_decoder_key_type(&gm_t->key)) {
	case BR_KEYTYPE_RSA:
		br_ssl_client_set_single_rsa(&gm_t->cc, gm_t->chain, gm_t->nchain, br_skey_decoder_get_rsa(&gm_t->key),
					     br_rsa_pkcs1_sign_get_default());
		break;
	case BR_KEYTYPE_EC:
		br_ssl_client_set_single_ec(&gm_t->cc, gm_t->chain, gm_t->nchain, br_skey_decoder_get_ec(&gm_t->key),
					    BR_KEYTYPE_SIGN, BR_KEYTYPE_EC, br_ec_get_default(),
					    br_ecdsa_sign_asn1_get_default());
		break;
	default:
		snprintf(why, wl, "%s=%s: a key of a type BearSSL cannot sign with", GM_ENV_TLS_KEY, key);
		return -1;
	}
	gm_t->client_key = 1;
	return 0;
}

/* ---- the server's name ---- */

/* gm_der_next reads one DER element at *p (before end): its tag (one
 * byte), its value; *p moves past it. */
static int gm_der_next(const unsigned char **p, const unsigned char *end, unsigned *tag, const unsigned char **val,
		       size_t *vlen)
{
	const unsigned char *q = *p;
	if (end - q < 2 || (q[0] & 0x1f) == 0x1f)
		return -1;
	*tag = q[0];
	size_t len = q[1];
	q += 2;
	if (len & 0x80) {
		size_t nb = len & 0x7f;
		if (nb == 0 || nb > 4 || (size_t)(end - q) < nb)
			return -1;
		len = 0;
		for (size_t i = 0; i < nb; i++)
			len = len << 8 | *q++;
	}
	if ((size_t)(end - q) < len)
		return -1;
	*val = q;
	*vlen = len;
	*p = q + len;
	return 0;
}

/* gm_san_has_ip reports whether the certificate der names ip (4 or 16
 * bytes) among its subjectAltName iPAddress entries. */
static int gm_san_has_ip(const unsigned char *der, size_t len, const unsigned char *ip, size_t iplen)
{
	static const unsigned char san_oid[] = {0x55, 0x1d, 0x11}; /* 2.5.29.17 */
	const unsigned char *p = der, *v;
	size_t vl;
	unsigned tag;
	/* Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { …, [3] { SEQUENCE OF Extension } } … } */
	if (gm_der_next(&p, der + len, &tag, &v, &vl) < 0 || tag != 0x30)
		return 0;
	p = v;
	if (gm_der_next(&p, v + vl, &tag, &v, &vl) < 0 || tag != 0x30)
		return 0;
	const unsigned char *tbs = v, *tbs_end = v + vl;
	for (p = tbs; p < tbs_end;) {
		if (gm_der_next(&p, tbs_end, &tag, &v, &vl) < 0)
			return 0;
		if (tag != 0xa3)
			continue;
		const unsigned char *q = v, *exts, *exts_end;
		if (gm_der_next(&q, v + vl, &tag, &exts, &vl) < 0 || tag != 0x30)
			return 0;
		exts_end = exts + vl;
		for (q = exts; q < exts_end;) {
			const unsigned char *ext, *ext_end, *r, *oid, *val;
			size_t el, ol, valn;
			if (gm_der_next(&q, exts_end, &tag, &ext, &el) < 0 || tag != 0x30)
				return 0;
			ext_end = ext + el;
			r = ext;
			if (gm_der_next(&r, ext_end, &tag, &oid, &ol) < 0 || tag != 0x06)
				return 0;
			if (ol != sizeof san_oid || memcmp(oid, san_oid, ol) != 0)
				continue;
			if (gm_der_next(&r, ext_end, &tag, &val, &valn) < 0)
				return 0;
			if (tag == 0x01 && gm_der_next(&r, ext_end, &tag, &val, &valn) < 0) /* critical */
				return 0;
			if (tag != 0x04)
				return 0;
			const unsigned char *seq = val, *names;
			if (gm_der_next(&seq, val + valn, &tag, &names, &valn) < 0 || tag != 0x30)
				return 0;
			const unsigned char *names_end = names + valn;
			while (names < names_end) {
				const unsigned char *gn;
				size_t gl;
				if (gm_der_next(&names, names_end, &tag, &gn, &gl) < 0)
					return 0;
				if (tag == 0x87 && gl == iplen && memcmp(gn, ip, iplen) == 0)
					return 1;
			}
			return 0;
		}
		return 0;
	}
	return 0;
}

static gm_x509 *gm_x509_of(const br_x509_class **ctx)
{
	return (gm_x509 *)(void *)ctx;
}

static void gm_x509_start_chain(const br_x509_class **ctx, const char *server_name)
{
	gm_x509 *x = gm_x509_of(ctx);
	x->depth = 0;
	x->eelen = 0;
	x->ee_too_long = 0;
	x->minimal.vtable->start_chain(&x->minimal.vtable, server_name);
}

static void gm_x509_start_cert(const br_x509_class **ctx, uint32_t length)
{
	gm_x509 *x = gm_x509_of(ctx);
	if (x->depth == 0 && length > sizeof x->ee)
		x->ee_too_long = 1;
	x->minimal.vtable->start_cert(&x->minimal.vtable, length);
}

static void gm_x509_append(const br_x509_class **ctx, const unsigned char *buf, size_t len)
{
	gm_x509 *x = gm_x509_of(ctx);
	if (x->depth == 0 && !x->ee_too_long) {
		if (len > sizeof x->ee - x->eelen) {
			x->ee_too_long = 1;
		} else {
			memcpy(x->ee + x->eelen, buf, len);
			x->eelen += len;
		}
	}
	x->minimal.vtable->append(&x->minimal.vtable, buf, len);
}

static void gm_x509_end_cert(const br_x509_class **ctx)
{
	gm_x509 *x = gm_x509_of(ctx);
	x->minimal.vtable->end_cert(&x->minimal.vtable);
	x->depth++;
}

static unsigned gm_x509_end_chain(const br_x509_class **ctx)
{
	gm_x509 *x = gm_x509_of(ctx);
	unsigned err = x->minimal.vtable->end_chain(&x->minimal.vtable);
	if (err != 0 || x->iplen == 0)
		return err;
	if (x->ee_too_long)
		return BR_ERR_X509_LIMIT_EXCEEDED;
	return gm_san_has_ip(x->ee, x->eelen, x->ip, x->iplen) ? 0 : BR_ERR_X509_BAD_SERVER_NAME;
}

static const br_x509_pkey *gm_x509_get_pkey(const br_x509_class *const *ctx, unsigned *usages)
{
	const gm_x509 *x = (const gm_x509 *)(const void *)ctx;
	return x->minimal.vtable->get_pkey(&x->minimal.vtable, usages);
}

static const br_x509_class gm_x509_vtable = {
	sizeof(gm_x509),     gm_x509_start_chain, gm_x509_start_cert, gm_x509_append,
	gm_x509_end_cert,    gm_x509_end_chain,   gm_x509_get_pkey,
};

/* gm_server_name sets gm_t->server from GPUMUX_REMOTE_TLS_SERVER_NAME or
 * the host of addr ("host:port", "[v6]:port"). */
static int gm_server_name(const char *addr, char *why, size_t wl)
{
	const char *env = getenv(GM_ENV_TLS_SERVER_NAME);
	if (env != NULL && *env != 0) {
		if (strlen(env) >= sizeof gm_t->server) {
			snprintf(why, wl, "%s is too long", GM_ENV_TLS_SERVER_NAME);
			return -1;
		}
		snprintf(gm_t->server, sizeof gm_t->server, "%s", env);
		return 0;
	}
	const char *start = addr, *end = strrchr(addr, ':');
	if (addr[0] == '[') {
		start = addr + 1;
		end = strchr(addr, ']');
	}
	if (end == NULL || end <= start || (size_t)(end - start) >= sizeof gm_t->server) {
		snprintf(why, wl, "no host in the address to check the server's certificate against");
		return -1;
	}
	memcpy(gm_t->server, start, (size_t)(end - start));
	gm_t->server[end - start] = 0;
	return 0;
}

/* ---- the engine ---- */

static const char *gm_alert_name(int a)
{
	switch (a) {
	case 40:
		return "handshake failure";
	case 42:
		return "bad certificate";
	case 43:
		return "unsupported certificate";
	case 45:
		return "certificate expired";
	case 46:
		return "certificate unknown";
	case 48:
		return "unknown CA";
	case 70:
		return "protocol version";
	case 71:
		return "insufficient security";
	case 116:
		return "certificate required";
	default:
		return "see RFC 8446";
	}
}

/* gm_tls_failed says why the engine failed. */
static void gm_tls_failed(char *why, size_t wl)
{
	int err = br_ssl_engine_last_error(&gm_t->cc.eng);
	const char *s = gm_t->server;
	switch (err) {
	case BR_ERR_OK:
		snprintf(why, wl, "the server closed the TLS connection");
		return;
	case BR_ERR_X509_NOT_TRUSTED:
		snprintf(why, wl, "TLS: the server's certificate is not signed by a CA of %s=%s", GM_ENV_TLS_CA, gm_t->ca);
		return;
	case BR_ERR_X509_BAD_SERVER_NAME:
		snprintf(why, wl,
			 "TLS: the server's certificate does not name %s (among its DNS names or IP addresses; %s sets the name to check)",
			 s, GM_ENV_TLS_SERVER_NAME);
		return;
	case BR_ERR_X509_EXPIRED:
		snprintf(why, wl, "TLS: the server's certificate, or a CA's in its chain, is expired or not valid yet");
		return;
	case BR_ERR_X509_LIMIT_EXCEEDED:
		snprintf(why, wl, "TLS: the server's certificate is too large to check (over %u bytes)", GM_TLS_MAX_EE);
		return;
	case BR_ERR_BAD_CIPHER_SUITE:
	case BR_ERR_UNSUPPORTED_VERSION:
	case BR_ERR_BAD_VERSION:
		snprintf(why, wl, "TLS: no TLS 1.2 ECDHE suite with AES-GCM or ChaCha20-Poly1305 in common with the server");
		return;
	case BR_ERR_NO_RANDOM:
		snprintf(why, wl, "TLS: no randomness (getrandom and /dev/urandom both failed)");
		return;
	}
	if (err >= BR_ERR_SEND_FATAL_ALERT) {
		snprintf(why, wl, "TLS: this client ended the handshake with alert %d (%s)", err - BR_ERR_SEND_FATAL_ALERT,
			 gm_alert_name(err - BR_ERR_SEND_FATAL_ALERT));
	} else if (err >= BR_ERR_RECV_FATAL_ALERT) {
		int a = err - BR_ERR_RECV_FATAL_ALERT;
		const char *hint = "";
		if (a == 40 || a == 42 || a == 116 || (a == 48 && gm_t->client_key))
			hint = gm_t->client_key ? "; it may not accept this client's certificate (" GM_ENV_TLS_CERT ")"
						: "; it may want a client certificate (" GM_ENV_TLS_CERT ", " GM_ENV_TLS_KEY ")";
		snprintf(why, wl, "TLS: the server ended the connection with alert %d (%s)%s", a, gm_alert_name(a), hint);
	} else if (err >= BR_ERR_X509_OK) {
		snprintf(why, wl, "TLS: the server's certificate chain does not check out (BearSSL X.509 error %d)", err);
	} else {
		snprintf(why, wl, "TLS: %s (BearSSL error %d)", gm_t->up ? "the connection failed" : "the handshake failed", err);
	}
}

/* gm_tls_run drives the engine until its state has want (BR_SSL_SENDAPP,
 * BR_SSL_RECVAPP) or, with want 0, until every record is sent. */
static int gm_tls_run(unsigned want, char *why, size_t wl)
{
	br_ssl_engine_context *eng = &gm_t->cc.eng;
	char eb[128];
	for (;;) {
		unsigned st = br_ssl_engine_current_state(eng);
		if (st & BR_SSL_CLOSED) {
			gm_tls_failed(why, wl);
			return -1;
		}
		if (st & BR_SSL_SENDREC) {
			size_t len;
			unsigned char *buf = br_ssl_engine_sendrec_buf(eng, &len);
			ssize_t k = send(gm_t->fd, buf, len, MSG_NOSIGNAL);
			if (k > 0) {
				br_ssl_engine_sendrec_ack(eng, (size_t)k);
				continue;
			}
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				if (gm_wait(gm_t->fd, POLLOUT, why, wl) < 0)
					return -1;
				continue;
			}
			snprintf(why, wl, "send: %s", strerror_r(errno, eb, sizeof eb));
			return -1;
		}
		if (want == 0 || (st & want))
			return 0;
		if (st & BR_SSL_RECVREC) {
			size_t len;
			unsigned char *buf = br_ssl_engine_recvrec_buf(eng, &len);
			ssize_t k = recv(gm_t->fd, buf, len, 0);
			if (k > 0) {
				br_ssl_engine_recvrec_ack(eng, (size_t)k);
				continue;
			}
			if (!gm_t->up && (k == 0 || errno == ECONNRESET)) {
				snprintf(why, wl,
					 "the server closed the connection during the TLS handshake (is TLS served on this "
					 "port? gpumux-remoted --tls-cert-file)");
				return -1;
			}
			if (k == 0) {
				snprintf(why, wl, "the server closed the connection");
				return -1;
			}
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (gm_wait(gm_t->fd, POLLIN, why, wl) < 0)
					return -1;
				continue;
			}
			snprintf(why, wl, "recv: %s", strerror_r(errno, eb, sizeof eb));
			return -1;
		}
		/* Plaintext buffered for sending may block the way: send it. */
		br_ssl_engine_flush(eng, 0);
		if (br_ssl_engine_current_state(eng) == st) {
			snprintf(why, wl, "TLS: the engine is stuck (state %#x waiting for %#x)", st, want);
			return -1;
		}
	}
}

int gm_tls_sendv(struct iovec *iov, int n, char *why, size_t wl)
{
	br_ssl_engine_context *eng = &gm_t->cc.eng;
	for (int i = 0; i < n; i++) {
		const unsigned char *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left > 0) {
			if (gm_tls_run(BR_SSL_SENDAPP, why, wl) < 0)
				return -1;
			size_t room;
			unsigned char *buf = br_ssl_engine_sendapp_buf(eng, &room);
			size_t k = left < room ? left : room;
			memcpy(buf, p, k);
			br_ssl_engine_sendapp_ack(eng, k); /* a full record is sealed at once */
			p += k;
			left -= k;
		}
	}
	br_ssl_engine_flush(eng, 0);
	return gm_tls_run(0, why, wl);
}

int gm_tls_recv(void *dst, size_t n, char *why, size_t wl)
{
	br_ssl_engine_context *eng = &gm_t->cc.eng;
	unsigned char *p = dst;
	while (n > 0) {
		if (gm_tls_run(BR_SSL_RECVAPP, why, wl) < 0)
			return -1;
		size_t avail;
		unsigned char *buf = br_ssl_engine_recvapp_buf(eng, &avail);
		size_t k = n < avail ? n : avail;
		memcpy(p, buf, k);
		br_ssl_engine_recvapp_ack(eng, k);
		p += k;
		n -= k;
	}
	return 0;
}

/* ---- the session ---- */

static void gm_tls_free(struct gm_tls *t)
{
	for (size_t i = 0; i < t->ntas; i++) {
		br_x509_trust_anchor *ta = &t->tas[i];
		free(ta->dn.data);
		if (ta->pkey.key_type == BR_KEYTYPE_RSA) {
			free(ta->pkey.key.rsa.n);
			free(ta->pkey.key.rsa.e);
		} else {
			free(ta->pkey.key.ec.q);
		}
	}
	for (size_t i = 0; i < t->nchain; i++)
		free(t->chain[i].data);
	explicit_bzero(t, sizeof *t); /* keys, the client's private key */
	free(t);
}

void gm_tls_end(void)
{
	if (gm_t != NULL)
		gm_tls_free(gm_t);
	gm_t = NULL;
}

void gm_tls_forget(void)
{
	gm_t = NULL;
}

int gm_tls_start(int fd, const char *addr, char *why, size_t wl)
{
	const char *ca = getenv(GM_ENV_TLS_CA);
	if (ca == NULL || *ca == 0 || strncmp(addr, "unix:", 5) == 0)
		return 0;
	gm_tls_end();
	gm_t = calloc(1, sizeof *gm_t);
	if (gm_t == NULL) {
		snprintf(why, wl, "out of memory for TLS");
		return -1;
	}
	gm_t->fd = fd;
	gm_t->ca = ca;
	br_ssl_client_context *cc = &gm_t->cc;
	br_ssl_engine_context *eng = &cc->eng;
	if (gm_server_name(addr, why, wl) < 0 || gm_load_cas(ca, why, wl) < 0)
		goto fail;

	/* The profile: br_ssl_client_init_full's, cut to TLS 1.2, ECDHE and
	 * AEAD. */
	br_ssl_client_zero(cc);
	br_ssl_engine_set_versions(eng, BR_TLS12, BR_TLS12);
	br_ssl_engine_set_suites(eng, gm_tls_suites, sizeof gm_tls_suites / sizeof gm_tls_suites[0]);
	br_ssl_engine_set_default_rsavrfy(eng);
	br_ssl_engine_set_default_ecdsa(eng);
	br_ssl_engine_set_default_ec(eng);
	br_ssl_engine_set_prf_sha256(eng, &br_tls12_sha256_prf);
	br_ssl_engine_set_prf_sha384(eng, &br_tls12_sha384_prf);
	br_ssl_engine_set_default_aes_gcm(eng);
	br_ssl_engine_set_default_chapol(eng);

	gm_x509 *x = &gm_t->x509;
	x->vtable = &gm_x509_vtable;
	br_x509_minimal_init(&x->minimal, &br_sha256_vtable, gm_t->tas, gm_t->ntas);
	br_x509_minimal_set_rsa(&x->minimal, br_ssl_engine_get_rsavrfy(eng));
	br_x509_minimal_set_ecdsa(&x->minimal, br_ssl_engine_get_ec(eng), br_ssl_engine_get_ecdsa(eng));
	static const struct {
		int id;
		const br_hash_class *impl;
	} hashes[] = {
		{br_sha1_ID, &br_sha1_vtable},     {br_sha224_ID, &br_sha224_vtable}, {br_sha256_ID, &br_sha256_vtable},
		{br_sha384_ID, &br_sha384_vtable}, {br_sha512_ID, &br_sha512_vtable},
	};
	for (size_t i = 0; i < sizeof hashes / sizeof hashes[0]; i++) {
		br_ssl_engine_set_hash(eng, hashes[i].id, hashes[i].impl);
		br_x509_minimal_set_hash(&x->minimal, hashes[i].id, hashes[i].impl);
	}
	br_ssl_engine_set_x509(eng, &x->vtable);
	br_ssl_engine_set_buffer(eng, gm_t->iobuf, sizeof gm_t->iobuf, 1);

	const char *cert = getenv(GM_ENV_TLS_CERT), *key = getenv(GM_ENV_TLS_KEY);
	int has_cert = cert != NULL && *cert != 0, has_key = key != NULL && *key != 0;
	if (has_cert != has_key) {
		snprintf(why, wl, "%s and %s go together (mutual TLS)", GM_ENV_TLS_CERT, GM_ENV_TLS_KEY);
		goto fail;
	}
	if (has_cert && gm_load_client(cert, key, why, wl) < 0)
		goto fail;

	/* A DNS name goes to BearSSL (SNI and its check); an IP address is
	 * checked by gm_x509_end_chain, and sent nowhere. */
	const char *sni = gm_t->server;
	if (inet_pton(AF_INET, gm_t->server, x->ip) == 1) {
		x->iplen = 4;
		sni = NULL;
	} else if (inet_pton(AF_INET6, gm_t->server, x->ip) == 1) {
		x->iplen = 16;
		sni = NULL;
	}
	unsigned char seed[32];
	if (getrandom(seed, sizeof seed, 0) == (ssize_t)sizeof seed)
		br_ssl_engine_inject_entropy(eng, seed, sizeof seed);
	explicit_bzero(seed, sizeof seed);
	if (!br_ssl_client_reset(cc, sni, 0)) {
		gm_tls_failed(why, wl);
		goto fail;
	}
	if (gm_tls_run(BR_SSL_SENDAPP, why, wl) < 0)
		goto fail;
	gm_t->up = 1;
	if (gm_debug()) {
		br_ssl_session_parameters sp;
		br_ssl_engine_get_session_parameters(eng, &sp);
		gm_log("debug: TLS 1.2 with %s, cipher suite %#06x", gm_t->server, sp.cipher_suite);
	}
	return 0;
fail:
	gm_tls_end();
	return -1;
}
