/* Unit tests of the interposer's internals, linked with its sources (not
 * the library, whose internals are hidden): image sizes and the message
 * codec's argument limits. Needs no server. */
#include "../gm_internal.h"
#include "../gm_wire.h"
#include "t.h"

#include <unistd.h>

static void put16(unsigned char *p, uint16_t v)
{
	memcpy(p, &v, 2);
}
static void put32(unsigned char *p, uint32_t v)
{
	memcpy(p, &v, 4);
}
static void put64(unsigned char *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

/* An ELF64 with n sections of which the last ends at data_end, section
 * headers at shoff. */
static void elf(unsigned char *p, uint64_t shoff, int n, uint64_t data_off, uint64_t data_size)
{
	memset(p, 0, 64);
	memcpy(p, "\x7f" "ELF", 4);
	p[4] = 2;
	p[5] = 1;
	put64(p + 0x28, shoff);
	put16(p + 0x34, 64);
	put16(p + 0x3a, 64);
	put16(p + 0x3c, (uint16_t)n);
	for (int i = 0; i < n; i++) {
		unsigned char *sh = p + shoff + 64 * i;
		memset(sh, 0, 64);
		if (i == n - 1) {
			put32(sh + 4, 1); /* PROGBITS */
			put64(sh + 0x18, data_off);
			put64(sh + 0x20, data_size);
		}
	}
}

/* hex compares a 16-byte digest with its hex spelling. */
static int hex(const unsigned char d[16], const char *want)
{
	char got[33];
	for (int i = 0; i < 16; i++)
		snprintf(got + 2 * i, 3, "%02x", d[i]);
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "digest %s, want %s\n", got, want);
		return 0;
	}
	return 1;
}

/* MD2 against RFC 1319's test suite, and HMAC-MD2 against its definition
 * (RFC 2104) spelled out with MD2. */
static void md2_known_answers(void)
{
	unsigned char d[16];
	static const struct {
		const char *in, *md2;
	} rfc[] = {
		{"", "8350e5a3e24c153df2275c9f80692773"},
		{"a", "32ec01ec4a6dac72c0ab96fb34c0b5d1"},
		{"abc", "da853b0d3f88d99b30283a69e6ded6bb"},
		{"message digest", "ab4f496bfb2a530b219ff33031fe06b0"},
		{"abcdefghijklmnopqrstuvwxyz", "4e8ddff3650292ab5a4108c3aa47940b"},
		{"12345678901234567890123456789012345678901234567890123456789012345678901234567890",
		 "d5976f79d83d3a0dc9806c3c66f3efd8"},
	};
	for (size_t i = 0; i < sizeof rfc / sizeof rfc[0]; i++) {
		gm_md2_sum(rfc[i].in, strlen(rfc[i].in), d);
		ASSERT(hex(d, rfc[i].md2));
	}

	unsigned char key[16], inner[16 + 7], outer[32], want[16], got[16];
	for (int i = 0; i < 16; i++) {
		key[i] = (unsigned char)(i * 17 + 3);
		inner[i] = key[i] ^ 0x36;
		outer[i] = key[i] ^ 0x5c;
	}
	memcpy(inner + 16, "gpu", 3);
	memcpy(inner + 19, "mux!", 4);
	gm_md2_sum(inner, sizeof inner, outer + 16);
	gm_md2_sum(outer, sizeof outer, want);
	gm_hmac_md2(key, "gpu", 3, "mux!", 4, got);
	ASSERT(memcmp(got, want, 16) == 0);
}

int main(void)
{
	static unsigned char img[8192];

	md2_known_answers();

	/* ELF: the section header table at the end (nvcc's cubins) */
	elf(img, 1000, 3, 64, 100);
	ASSERT(gm_image_size(img) == 1000 + 3 * 64);
	/* a section after the table */
	elf(img, 200, 2, 4000, 96);
	ASSERT(gm_image_size(img) == 4096);
	/* NOBITS sections take no room */
	elf(img, 200, 2, 4000, 96);
	put32(img + 200 + 64 + 4, 8);
	ASSERT(gm_image_size(img) == 200 + 2 * 64);
	/* program headers */
	elf(img, 200, 2, 64, 8);
	put64(img + 0x20, 400);
	put16(img + 0x36, 56);
	put16(img + 0x38, 1);
	memset(img + 400, 0, 56);
	put64(img + 400 + 8, 1000);
	put64(img + 400 + 0x20, 500);
	ASSERT(gm_image_size(img) == 1500);
	/* ELF32 and absurd sizes are no image */
	elf(img, 200, 2, 64, 8);
	img[4] = 1;
	ASSERT(gm_image_size(img) == 0);
	elf(img, 200, 2, 64, 1ull << 40);
	ASSERT(gm_image_size(img) == 0);

	/* fatbin: header size + fat size */
	memset(img, 0, 64);
	put32(img, 0xBA55ED50u);
	put16(img + 4, 1);
	put16(img + 6, 16);
	put64(img + 8, 4000);
	ASSERT(gm_image_size(img) == 4016);
	ASSERT(gm_image_data(img) == img);
	/* the wrapper: its data pointer's fatbin */
	unsigned char wrapper[24];
	memset(wrapper, 0, sizeof wrapper);
	put32(wrapper, 0x466243b1u);
	put32(wrapper + 4, 1);
	const void *data = img;
	memcpy(wrapper + 8, &data, sizeof data);
	ASSERT(gm_image_size(wrapper) == 4016);
	ASSERT(gm_image_data(wrapper) == img);
	data = NULL;
	memcpy(wrapper + 8, &data, sizeof data);
	ASSERT(gm_image_size(wrapper) == 0);
	/* a wrapper that points at something else */
	data = "just text";
	memcpy(wrapper + 8, &data, sizeof data);
	ASSERT(gm_image_size(wrapper) == 0);

	/* text (PTX): with its NUL */
	ASSERT(gm_image_size("//\n.version 8.0\n.target sm_90\n") == 31);
	ASSERT(gm_image_size("P") == 2); /* starts like a fatbin magic, stops at the NUL */
	ASSERT(gm_image_size("\x7f") == 0);
	ASSERT(gm_image_size("") == 0);
	ASSERT(gm_image_size("bin\x01ary") == 0);
	ASSERT(gm_image_size(NULL) == 0);
	ASSERT(gm_image_size(t_fake_module) == strlen(t_fake_module) + 1);

	/* A file whose headers point past its end is no image, and is not
	 * read past its end. */
	char path[] = "/tmp/gm-unit-XXXXXX";
	int fd = mkstemp(path);
	ASSERT(fd >= 0);
	elf(img, 256, 2, 64, 8);
	put64(img + 0x28, 1u << 24); /* the section headers, 16 MiB in */
	ASSERT(write(fd, img, 512) == 512);
	close(fd);
	CUmodule mod;
	EXPECT(cuModuleLoad(&mod, path), CUDA_ERROR_INVALID_IMAGE);
	unlink(path);

	/* Arguments the protocol cannot carry never leave the process (no
	 * server is configured: a send would say CUDA_ERROR_NO_DEVICE). */
	unsetenv("GPUMUX_REMOTE_ADDR");
	static char longname[GM_MAX_STRING + 2];
	memset(longname, 'k', sizeof longname - 1);
	CUfunction f;
	EXPECT(cuModuleGetFunction(&f, (CUmodule)0x1000, longname), CUDA_ERROR_INVALID_VALUE);
	static unsigned char blob[GM_MAX_BLOB + 1];
	size_t bs = sizeof blob;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, blob, CU_LAUNCH_PARAM_BUFFER_SIZE, &bs, CU_LAUNCH_PARAM_END};
	EXPECT(cuLaunchKernel((CUfunction)0x1000, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, extra), CUDA_ERROR_INVALID_VALUE);
	gm_msg m;
	gm_msg_init(&m, 1, GM_SYNC);
	gm_put_str(&m, longname);
	EXPECT(gm_call(&m), CUDA_ERROR_INVALID_VALUE);
	gm_msg_free(&m);
	gm_msg_init(&m, 1, GM_SYNC);
	for (int i = 0; i < 40; i++)
		gm_put_bytes(&m, blob, GM_MAX_BLOB);
	EXPECT(gm_call(&m), CUDA_ERROR_INVALID_VALUE); /* past GM_MAX_PAYLOAD */
	gm_msg_free(&m);

	/* And then a real call without a server: no device. */
	EXPECT(cuInit(0), CUDA_ERROR_NO_DEVICE);
	return t_done("unit");
}
