/*
 * nvidia-smi for containers on a remote share: mounted at /usr/bin/nvidia-smi
 * in a container that uses a remote GPU (remote/provider.go), where NVIDIA's
 * nvidia-smi cannot run (it needs the private table of the driver's own
 * libnvidia-ml.so.1, which the node does not have). It answers from
 * gpumux's NVML for remote shares (remote/nvml, the libnvidia-ml.so.1 next
 * to the interposer), that is for the share, never for the whole GPU:
 * the GPU's name, UUID, PCI address, compute capability and MIG mode, the
 * share's memory, and the calling process's use of it. What that NVML does
 * not know (temperature, power, clocks, utilization, the driver's version)
 * is printed as N/A, as nvidia-smi does for what a GPU does not report.
 *
 * The forms scripts and people use: the summary table (no arguments), -L,
 * -q, --query-gpu=... and --query-compute-apps=... with
 * --format=csv[,noheader][,nounits], -i to select GPUs. Exit status: 0, 2 for
 * a bad argument, or the NVML error code (nvidia-smi's convention; 9 when
 * the server cannot be reached).
 */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

#include "nvml_abi.h"

#define NA "[N/A]"
#define MAX_GPUS 64
#define EXIT_USAGE 2

/* What is known about one GPU of the share. */
struct gpu {
	unsigned index;
	nvmlDevice_t dev;
	char name[96];
	char uuid[96];
	nvmlPciInfo_t pci;
	int cc_major, cc_minor;
	int mig_known;
	unsigned mig_current, mig_pending;
	nvmlMemory_v2_t mem;
	unsigned nprocs;
	nvmlProcessInfo_v2_t procs[16];
};

static struct {
	int cuda_version; /* cuDriverGetVersion's, 0 if unknown */
	unsigned count;
	struct gpu gpus[MAX_GPUS];
} sys;

static const char *prog = "nvidia-smi";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(prog, stderr);
	fputs(": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputs("\nRun 'nvidia-smi -h' for the options this nvidia-smi (gpumux, remote share) answers.\n", stderr);
	va_end(ap);
	return EXIT_USAGE;
}

static void help(void)
{
	puts("nvidia-smi (gpumux) -- the GPU of a remote share, as gpumux's NVML answers for it\n"
	     "\n"
	     "This container uses a GPU of another machine through gpumux-remoted. This\n"
	     "nvidia-smi reports the share: its memory is the share's quota and what the\n"
	     "share's processes hold; processes are those of this container that NVML can\n"
	     "see (the calling one). Temperature, power, clocks, utilization and the\n"
	     "driver's version are not known here and print as N/A.\n"
	     "\n"
	     "Usage: nvidia-smi [options]\n"
	     "\n"
	     "    (no option)               the summary table\n"
	     "    -L, --list-gpus           one line per GPU: index, name, UUID\n"
	     "    -q, --query               the details of each GPU\n"
	     "    -i, --id=ID[,ID...]       only these GPUs: index, UUID or PCI bus id\n"
	     "    --query-gpu=FIELD,...     the fields of each GPU, with --format=csv\n"
	     "    --query-compute-apps=FIELD,...\n"
	     "                              the compute processes, with --format=csv\n"
	     "    --format=csv[,noheader][,nounits]\n"
	     "    --help-query-gpu          the fields --query-gpu takes\n"
	     "    --help-query-compute-apps the fields --query-compute-apps takes\n"
	     "    -h, --help                this text\n"
	     "\n"
	     "Exit status: 0; 2 for a bad argument; else NVML's error code (9: the remote\n"
	     "GPU cannot be reached; the lines before say why).");
}

/* ---- reading the GPUs ---- */

static nvmlReturn_t load_gpu(unsigned i, struct gpu *g)
{
	nvmlReturn_t r;
	memset(g, 0, sizeof *g);
	g->index = i;
	if ((r = nvmlDeviceGetHandleByIndex_v2(i, &g->dev)) != NVML_SUCCESS)
		return r;
	if ((r = nvmlDeviceGetName(g->dev, g->name, sizeof g->name)) != NVML_SUCCESS)
		return r;
	if ((r = nvmlDeviceGetUUID(g->dev, g->uuid, sizeof g->uuid)) != NVML_SUCCESS)
		return r;
	if ((r = nvmlDeviceGetPciInfo_v3(g->dev, &g->pci)) != NVML_SUCCESS)
		return r;
	if ((r = nvmlDeviceGetCudaComputeCapability(g->dev, &g->cc_major, &g->cc_minor)) != NVML_SUCCESS)
		return r;
	g->mig_known = nvmlDeviceGetMigMode(g->dev, &g->mig_current, &g->mig_pending) == NVML_SUCCESS;
	g->mem.version = nvmlMemory_v2;
	if ((r = nvmlDeviceGetMemoryInfo_v2(g->dev, &g->mem)) != NVML_SUCCESS)
		return r;
	g->nprocs = sizeof g->procs / sizeof g->procs[0];
	if ((r = nvmlDeviceGetComputeRunningProcesses_v3(g->dev, &g->nprocs, g->procs)) != NVML_SUCCESS)
		return r;
	return NVML_SUCCESS;
}

static int load(void)
{
	nvmlReturn_t r = nvmlInit_v2();
	if (r != NVML_SUCCESS) {
		fprintf(stderr,
			"%s: the remote GPU cannot be used: %s (the lines above say why)\n",
			prog, nvmlErrorString(r));
		return (int)r;
	}
	if (nvmlSystemGetCudaDriverVersion_v2(&sys.cuda_version) != NVML_SUCCESS)
		sys.cuda_version = 0;
	if ((r = nvmlDeviceGetCount_v2(&sys.count)) != NVML_SUCCESS)
		goto fail;
	if (sys.count > MAX_GPUS)
		sys.count = MAX_GPUS;
	for (unsigned i = 0; i < sys.count; i++)
		if ((r = load_gpu(i, &sys.gpus[i])) != NVML_SUCCESS)
			goto fail;
	return 0;
fail:
	fprintf(stderr, "%s: %s\n", prog, nvmlErrorString(r));
	return (int)r;
}

/* ---- selecting GPUs (-i) ---- */

static unsigned char selected[MAX_GPUS];

static int matches(const struct gpu *g, const char *id)
{
	char *end;
	unsigned long n = strtoul(id, &end, 10);
	if (*id != '\0' && *end == '\0')
		return n == g->index;
	if (strcasecmp(id, g->uuid) == 0 || strcasecmp(id, g->pci.busId) == 0)
		return 1;
	/* A bus id may be written with the short (4-digit) domain, as lspci does. */
	size_t k = strlen(id), m = strlen(g->pci.busId);
	return k >= 7 && k < m && strcasecmp(id, g->pci.busId + (m - k)) == 0 && strchr(id, ':') != NULL;
}

static int select_gpus(const char *ids)
{
	if (ids == NULL) {
		memset(selected, 1, sizeof selected);
		return 0;
	}
	char *copy = strdup(ids), *save = NULL;
	if (copy == NULL)
		return 1;
	int rc = 0;
	for (char *id = strtok_r(copy, ",", &save); id != NULL; id = strtok_r(NULL, ",", &save)) {
		int found = 0;
		for (unsigned i = 0; i < sys.count; i++)
			if (matches(&sys.gpus[i], id))
				selected[i] = found = 1;
		if (!found) {
			fprintf(stderr, "%s: no GPU %s: this container's share has %u GPU(s), 0 to %u by index\n", prog,
				id, sys.count, sys.count ? sys.count - 1 : 0);
			rc = 6; /* NVML_ERROR_NOT_FOUND, as nvidia-smi's "No devices were found" */
			break;
		}
	}
	free(copy);
	return rc;
}

/* ---- formatting values ---- */

static unsigned long long mib(unsigned long long bytes)
{
	return bytes >> 20;
}

static const char *mig_mode(unsigned m)
{
	return m == NVML_DEVICE_MIG_DISABLE ? "Disabled" : "Enabled";
}

static void timestamp(char *out, size_t n)
{
	struct timeval tv;
	struct tm tm;
	gettimeofday(&tv, NULL);
	localtime_r(&tv.tv_sec, &tm);
	size_t k = strftime(out, n, "%Y/%m/%d %H:%M:%S", &tm);
	snprintf(out + k, n - k, ".%03ld", (long)(tv.tv_usec / 1000));
}

static void cuda_version(char *out, size_t n)
{
	if (sys.cuda_version > 0)
		snprintf(out, n, "%d.%d", sys.cuda_version / 1000, sys.cuda_version % 1000 / 10);
	else
		snprintf(out, n, "N/A");
}

/* ---- --query-gpu and --query-compute-apps ---- */

struct format {
	int header, units;
};

/* A field: its names (the first is the header's), its unit (or NULL) and
 * how it is printed; a NULL print is N/A here. */
struct field {
	const char *names[3];
	const char *unit;
	void (*print)(const struct gpu *g, const nvmlProcessInfo_v2_t *p, char *out, size_t n);
	const char *help;
};

#define PRINTER(fn, ...)                                                                         \
	static void fn(const struct gpu *g, const nvmlProcessInfo_v2_t *p, char *out, size_t n) \
	{                                                                                        \
		(void)g;                                                                         \
		(void)p;                                                                         \
		snprintf(out, n, __VA_ARGS__);                                                   \
	}
PRINTER(f_count, "%u", sys.count)
PRINTER(f_name, "%s", g->name)
PRINTER(f_index, "%u", g->index)
PRINTER(f_uuid, "%s", g->uuid)
PRINTER(f_bus_id, "%s", g->pci.busId)
PRINTER(f_domain, "0x%04X", g->pci.domain)
PRINTER(f_bus, "0x%02X", g->pci.bus)
PRINTER(f_device, "0x%02X", g->pci.device)
PRINTER(f_device_id, "0x%08X", g->pci.pciDeviceId)
PRINTER(f_sub_device_id, "0x%08X", g->pci.pciSubSystemId)
PRINTER(f_mem_total, "%llu", mib(g->mem.total))
PRINTER(f_mem_used, "%llu", mib(g->mem.used))
PRINTER(f_mem_free, "%llu", mib(g->mem.free))
PRINTER(f_mem_reserved, "%llu", mib(g->mem.reserved))
PRINTER(f_cc, "%d.%d", g->cc_major, g->cc_minor)
PRINTER(f_mig_current, "%s", g->mig_known ? mig_mode(g->mig_current) : NA)
PRINTER(f_mig_pending, "%s", g->mig_known ? mig_mode(g->mig_pending) : NA)
PRINTER(f_pid, "%u", p->pid)
PRINTER(f_used_memory, "%llu", mib(p->usedGpuMemory))

static void f_timestamp(const struct gpu *g, const nvmlProcessInfo_v2_t *p, char *out, size_t n)
{
	(void)g;
	(void)p;
	timestamp(out, n);
}

static void f_process_name(const struct gpu *g, const nvmlProcessInfo_v2_t *p, char *out, size_t n)
{
	(void)g;
	if (nvmlSystemGetProcessName(p->pid, out, (unsigned)n) != NVML_SUCCESS)
		snprintf(out, n, NA);
}

static const struct field gpu_fields[] = {
	{{"timestamp"}, NULL, f_timestamp, "the time of the query"},
	{{"driver_version"}, NULL, NULL, "the driver's version: not known on a remote share"},
	{{"count"}, NULL, f_count, "the number of GPUs of the share"},
	{{"name", "gpu_name"}, NULL, f_name, "the GPU's product name"},
	{{"index"}, NULL, f_index, "the GPU's index in this container"},
	{{"uuid", "gpu_uuid"}, NULL, f_uuid, "the GPU's UUID (the server's GPU)"},
	{{"serial", "gpu_serial"}, NULL, NULL, "not known on a remote share"},
	{{"pci.bus_id", "gpu_bus_id"}, NULL, f_bus_id, "the GPU's PCI bus id on the server"},
	{{"pci.domain"}, NULL, f_domain, ""},
	{{"pci.bus"}, NULL, f_bus, ""},
	{{"pci.device"}, NULL, f_device, ""},
	{{"pci.device_id"}, NULL, f_device_id, ""},
	{{"pci.sub_device_id"}, NULL, f_sub_device_id, ""},
	{{"memory.total"}, "MiB", f_mem_total, "the share's memory: its quota, or the GPU's if smaller"},
	{{"memory.used"}, "MiB", f_mem_used, "what the share's processes hold"},
	{{"memory.free"}, "MiB", f_mem_free, "memory.total - memory.used"},
	{{"memory.reserved"}, "MiB", f_mem_reserved, "0: nothing of a share is reserved"},
	{{"compute_cap"}, NULL, f_cc, "the CUDA compute capability"},
	{{"mig.mode.current"}, NULL, f_mig_current, ""},
	{{"mig.mode.pending"}, NULL, f_mig_pending, ""},
	{{"vbios_version"}, NULL, NULL, ""},
	{{"persistence_mode"}, NULL, NULL, ""},
	{{"display_mode"}, NULL, NULL, ""},
	{{"display_active"}, NULL, NULL, ""},
	{{"pstate"}, NULL, NULL, ""},
	{{"compute_mode"}, NULL, NULL, ""},
	{{"fan.speed"}, "%", NULL, ""},
	{{"temperature.gpu"}, NULL, NULL, ""},
	{{"temperature.memory"}, NULL, NULL, ""},
	{{"utilization.gpu"}, "%", NULL, ""},
	{{"utilization.memory"}, "%", NULL, ""},
	{{"power.draw"}, "W", NULL, ""},
	{{"power.limit"}, "W", NULL, ""},
	{{"clocks.sm", "clocks.current.sm"}, "MHz", NULL, ""},
	{{"clocks.mem", "clocks.current.memory"}, "MHz", NULL, ""},
	{{"clocks.gr", "clocks.current.graphics"}, "MHz", NULL, ""},
	{{"clocks.max.sm", "clocks.max.streaming_multiprocessor"}, "MHz", NULL, ""},
	{{"clocks.max.mem", "clocks.max.memory"}, "MHz", NULL, ""},
	{{"ecc.mode.current"}, NULL, NULL, ""},
	{{"ecc.errors.uncorrected.volatile.total"}, NULL, NULL, ""},
	{{NULL}, NULL, NULL, NULL},
};

static const struct field app_fields[] = {
	{{"timestamp"}, NULL, f_timestamp, "the time of the query"},
	{{"gpu_name"}, NULL, f_name, "the process's GPU: its name"},
	{{"gpu_bus_id"}, NULL, f_bus_id, "its PCI bus id"},
	{{"gpu_serial"}, NULL, NULL, "not known on a remote share"},
	{{"gpu_uuid"}, NULL, f_uuid, "its UUID"},
	{{"pid"}, NULL, f_pid, "the process's id in this container"},
	{{"process_name", "name"}, NULL, f_process_name, "the process's name"},
	{{"used_gpu_memory", "used_memory"}, "MiB", f_used_memory, "the memory the process holds"},
	{{NULL}, NULL, NULL, NULL},
};

static const struct field *find_field(const struct field *fields, const char *name)
{
	for (const struct field *f = fields; f->names[0] != NULL; f++)
		for (int i = 0; i < 3 && f->names[i] != NULL; i++)
			if (strcasecmp(name, f->names[i]) == 0)
				return f;
	return NULL;
}

static void help_fields(const char *what, const struct field *fields)
{
	printf("The fields of %s this nvidia-smi (gpumux, remote share) answers;\n"
	       "those marked [N/A] are accepted and print [N/A] here; any other is an error.\n\n",
	       what);
	for (const struct field *f = fields; f->names[0] != NULL; f++) {
		printf("\"%s\"", f->names[0]);
		for (int i = 1; i < 3 && f->names[i] != NULL; i++)
			printf(" or \"%s\"", f->names[i]);
		printf("%s\n", f->print == NULL ? " [N/A]" : "");
		if (f->help != NULL && f->help[0] != '\0')
			printf("    %s%s%s%s\n", f->help, f->unit ? " (" : "", f->unit ? f->unit : "", f->unit ? ")" : "");
	}
}

/* parse_fields splits a comma-separated field list into out (at most max);
 * an unknown field is a usage error, named. */
static int parse_fields(const struct field *fields, const char *list, const struct field **out, int max, int *n)
{
	char *copy = strdup(list), *save = NULL;
	if (copy == NULL)
		return 1;
	*n = 0;
	int rc = 0;
	for (char *name = strtok_r(copy, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
		while (*name == ' ')
			name++;
		const struct field *f = find_field(fields, name);
		if (f == NULL) {
			rc = usage_error("field \"%s\" is not a valid field to query (see --help-query-%s)", name,
					 fields == gpu_fields ? "gpu" : "compute-apps");
			break;
		}
		if (*n == max) {
			rc = usage_error("more than %d fields to query", max);
			break;
		}
		out[(*n)++] = f;
	}
	free(copy);
	if (rc == 0 && *n == 0)
		rc = usage_error("no field to query");
	return rc;
}

static int parse_format(const char *spec, struct format *fmt)
{
	*fmt = (struct format){.header = 1, .units = 1};
	if (spec == NULL)
		return usage_error("--query-gpu and --query-compute-apps need --format=csv[,noheader][,nounits]");
	char *copy = strdup(spec), *save = NULL;
	if (copy == NULL)
		return 1;
	int csv = 0, rc = 0;
	for (char *o = strtok_r(copy, ",", &save); o != NULL; o = strtok_r(NULL, ",", &save)) {
		while (*o == ' ')
			o++;
		if (strcasecmp(o, "csv") == 0)
			csv = 1;
		else if (strcasecmp(o, "noheader") == 0)
			fmt->header = 0;
		else if (strcasecmp(o, "nounits") == 0)
			fmt->units = 0;
		else {
			rc = usage_error("--format=%s: \"%s\" is not one of csv, noheader, nounits", spec, o);
			break;
		}
	}
	free(copy);
	if (rc == 0 && !csv)
		rc = usage_error("--format=%s: csv is the only format", spec);
	return rc;
}

static void print_header(const struct field *const *fs, int n)
{
	for (int i = 0; i < n; i++)
		printf("%s%s%s%s%s", i ? ", " : "", fs[i]->names[0], fs[i]->unit ? " [" : "",
		       fs[i]->unit ? fs[i]->unit : "", fs[i]->unit ? "]" : "");
	putchar('\n');
}

static void print_row(const struct field *const *fs, int n, const struct format *fmt, const struct gpu *g,
		      const nvmlProcessInfo_v2_t *p)
{
	char v[256];
	for (int i = 0; i < n; i++) {
		if (fs[i]->print == NULL)
			snprintf(v, sizeof v, NA);
		else
			fs[i]->print(g, p, v, sizeof v);
		int unit = fmt->units && fs[i]->unit != NULL && fs[i]->print != NULL;
		printf("%s%s%s%s", i ? ", " : "", v, unit ? " " : "", unit ? fs[i]->unit : "");
	}
	putchar('\n');
}

/* A parsed --query-...: its fields and format. */
struct query {
	const struct field *fields; /* gpu_fields or app_fields */
	const struct field *fs[64];
	int n;
	struct format fmt;
};

static int parse_query(struct query *q, const struct field *fields, const char *list, const char *format)
{
	q->fields = fields;
	int rc = parse_fields(fields, list, q->fs, 64, &q->n);
	return rc != 0 ? rc : parse_format(format, &q->fmt);
}

static void query(const struct query *q)
{
	const struct field *const *fs = q->fs;
	int n = q->n;
	const struct format fmt = q->fmt;
	if (fmt.header)
		print_header(fs, n);
	for (unsigned i = 0; i < sys.count; i++) {
		const struct gpu *g = &sys.gpus[i];
		if (!selected[i])
			continue;
		if (q->fields == gpu_fields)
			print_row(fs, n, &fmt, g, NULL);
		else
			for (unsigned j = 0; j < g->nprocs; j++)
				print_row(fs, n, &fmt, g, &g->procs[j]);
	}
}

/* ---- -L, -q and the table ---- */

static void list_gpus(void)
{
	for (unsigned i = 0; i < sys.count; i++)
		if (selected[i])
			printf("GPU %u: %s (UUID: %s)\n", i, sys.gpus[i].name, sys.gpus[i].uuid);
}

static void details(void)
{
	char ts[64], cuda[16];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(ts, sizeof ts, "%a %b %e %H:%M:%S %Y", &tm);
	cuda_version(cuda, sizeof cuda);
	printf("\n==============NVSMI LOG==============\n\n");
	printf("%-42s: %s\n%-42s: N/A\n%-42s: %s\n\n%-42s: %u\n", "Timestamp", ts, "Driver Version", "CUDA Version", cuda,
	       "Attached GPUs", sys.count);
	for (unsigned i = 0; i < sys.count; i++) {
		const struct gpu *g = &sys.gpus[i];
		if (!selected[i])
			continue;
		printf("GPU %s\n", g->pci.busId);
		printf("    %-38s: %s\n", "Product Name", g->name);
		printf("    %-38s: remote share (gpumux-remoted)\n", "Product Architecture");
		printf("    MIG Mode\n        %-34s: %s\n        %-34s: %s\n", "Current",
		       g->mig_known ? mig_mode(g->mig_current) : "N/A", "Pending",
		       g->mig_known ? mig_mode(g->mig_pending) : "N/A");
		printf("    %-38s: %s\n", "GPU UUID", g->uuid);
		printf("    %-38s: %d.%d\n", "Compute Capability", g->cc_major, g->cc_minor);
		printf("    PCI\n        %-34s: 0x%02X\n        %-34s: 0x%02X\n        %-34s: 0x%04X\n"
		       "        %-34s: 0x%08X\n        %-34s: %s\n",
		       "Bus", g->pci.bus, "Device", g->pci.device, "Domain", g->pci.domain, "Device Id", g->pci.pciDeviceId,
		       "Bus Id", g->pci.busId);
		printf("    FB Memory Usage\n        %-34s: %llu MiB\n        %-34s: %llu MiB\n        %-34s: %llu MiB\n"
		       "        %-34s: %llu MiB\n",
		       "Total", mib(g->mem.total), "Reserved", mib(g->mem.reserved), "Used", mib(g->mem.used), "Free",
		       mib(g->mem.free));
		printf("    %-38s: N/A\n    %-38s: N/A\n    %-38s: N/A\n", "Temperature", "Power Readings", "Clocks");
		if (g->nprocs == 0) {
			printf("    %-38s: None\n", "Processes");
			continue;
		}
		printf("    Processes\n");
		for (unsigned j = 0; j < g->nprocs; j++) {
			char name[256];
			f_process_name(g, &g->procs[j], name, sizeof name);
			printf("        %-34s: %u\n        %-34s: C\n        %-34s: %s\n        %-34s: %llu MiB\n",
			       "Process ID", g->procs[j].pid, "Type", "Name", name, "Used GPU Memory",
			       mib(g->procs[j].usedGpuMemory));
		}
	}
}

#define RULE_WIDE "+-----------------------------------------------------------------------------------------+"
#define RULE_COLS "+-----------------------------------------+------------------------+----------------------+"

static void table(void)
{
	char ts[64], cuda[16], head[128];
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	strftime(ts, sizeof ts, "%a %b %e %H:%M:%S %Y", &tm);
	cuda_version(cuda, sizeof cuda);
	printf("%s\n%s\n", ts, RULE_WIDE);
	snprintf(head, sizeof head, "%-38s %-28s CUDA Version: %s", "NVIDIA-SMI (gpumux remote share)",
		 "Driver Version: N/A", cuda);
	printf("| %-87s |\n", head);
	printf("%s\n", RULE_COLS);
	printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n"
	       "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n"
	       "|                                         |                        |               MIG M. |\n"
	       "|=========================================+========================+======================|\n");
	for (unsigned i = 0; i < sys.count; i++) {
		const struct gpu *g = &sys.gpus[i];
		char mem[48], bus[24];
		if (!selected[i])
			continue;
		snprintf(mem, sizeof mem, "%lluMiB / %lluMiB", mib(g->mem.used), mib(g->mem.total));
		snprintf(bus, sizeof bus, "%.16s", g->pci.busId);
		printf("| %3u  %-26.26s %6s  | %-16s   N/A | %20s |\n", i, g->name, "N/A", bus, "N/A");
		printf("| N/A   N/A   N/A               N/A / N/A | %22s | %8s %11s |\n", mem, "N/A", "N/A");
		printf("|                                         |                        | %20s |\n",
		       g->mig_known ? mig_mode(g->mig_current) : "N/A");
		printf("%s\n", RULE_COLS);
	}
	printf("\n%s\n", RULE_WIDE);
	printf("| Processes:                                                                              |\n"
	       "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n"
	       "|        ID   ID                                                               Usage      |\n"
	       "|=========================================================================================|\n");
	int any = 0;
	for (unsigned i = 0; i < sys.count; i++) {
		const struct gpu *g = &sys.gpus[i];
		if (!selected[i])
			continue;
		for (unsigned j = 0; j < g->nprocs; j++) {
			char name[256], used[32];
			f_process_name(g, &g->procs[j], name, sizeof name);
			snprintf(used, sizeof used, "%lluMiB", mib(g->procs[j].usedGpuMemory));
			printf("|  %3u   N/A  N/A  %15u      C   %-34.34s %10s |\n", i, g->procs[j].pid, name, used);
			any = 1;
		}
	}
	if (!any)
		printf("|  %-86s |\n", "No running processes found");
	printf("%s\n", RULE_WIDE);
}

int main(int argc, char **argv)
{
	enum { OPT_QUERY_GPU = 256, OPT_QUERY_APPS, OPT_FORMAT, OPT_HELP_GPU, OPT_HELP_APPS };
	static const struct option opts[] = {
		{"help", no_argument, NULL, 'h'},
		{"list-gpus", no_argument, NULL, 'L'},
		{"query", no_argument, NULL, 'q'},
		{"id", required_argument, NULL, 'i'},
		{"query-gpu", required_argument, NULL, OPT_QUERY_GPU},
		{"query-compute-apps", required_argument, NULL, OPT_QUERY_APPS},
		{"format", required_argument, NULL, OPT_FORMAT},
		{"help-query-gpu", no_argument, NULL, OPT_HELP_GPU},
		{"help-query-compute-apps", no_argument, NULL, OPT_HELP_APPS},
		{NULL, 0, NULL, 0},
	};
	const char *ids = NULL, *query_gpu = NULL, *query_apps = NULL, *format = NULL;
	int mode = 0; /* 'L', 'q', or 0 for the table */
	opterr = 0;
	for (int c; (c = getopt_long(argc, argv, ":hLqi:", opts, NULL)) != -1;) {
		switch (c) {
		case 'h':
			help();
			return 0;
		case OPT_HELP_GPU:
			help_fields("--query-gpu", gpu_fields);
			return 0;
		case OPT_HELP_APPS:
			help_fields("--query-compute-apps", app_fields);
			return 0;
		case 'L':
		case 'q':
			mode = c;
			break;
		case 'i':
			ids = optarg;
			break;
		case OPT_QUERY_GPU:
			query_gpu = optarg;
			break;
		case OPT_QUERY_APPS:
			query_apps = optarg;
			break;
		case OPT_FORMAT:
			format = optarg;
			break;
		case ':':
			return usage_error("%s needs a value", argv[optind - 1]);
		default:
			return usage_error("%s is not an option this nvidia-smi answers", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument \"%s\"", argv[optind]);
	if (query_gpu != NULL && query_apps != NULL)
		return usage_error("--query-gpu and --query-compute-apps cannot be combined");
	if ((query_gpu != NULL || query_apps != NULL) && mode != 0)
		return usage_error("-%c cannot be combined with a --query-... option", mode);
	if (ids != NULL && ids[strspn(ids, ", ")] == '\0')
		return usage_error("-i \"%s\": want GPU indexes, UUIDs or PCI bus ids, separated by commas", ids);
	if (format != NULL && query_gpu == NULL && query_apps == NULL)
		return usage_error("--format goes with --query-gpu or --query-compute-apps");
	struct query q = {0};
	int rc = 0;
	if (query_gpu != NULL)
		rc = parse_query(&q, gpu_fields, query_gpu, format);
	else if (query_apps != NULL)
		rc = parse_query(&q, app_fields, query_apps, format);
	if (rc == 0)
		rc = load();
	if (rc == 0)
		rc = select_gpus(ids);
	if (rc != 0)
		return rc;
	if (q.fields != NULL)
		query(&q);
	else if (mode == 'L')
		list_gpus();
	else if (mode == 'q')
		details();
	else
		table();
	nvmlShutdown();
	return rc;
}
